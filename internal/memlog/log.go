// Package memlog is the log of the memory store (the root package's
// MemoryStore): each event kept as a compact record, a string of bytes in a
// chunk of memory that holds no pointers, which the garbage collector never
// scans. A record costs a bit per field at its zero value and a few bytes
// per field set: instants are nanoseconds relative to the record's first
// one, numbers are varints, and the strings that events repeat (kinds, reasons,
// rules, channel names, the prefixes of ids made of a prefix and a counter)
// are interned. The few values that hold pointers (a policy, a map), and an
// instant that nanoseconds cannot give back as it was (another location, a
// monotonic reading), are kept beside the records, by reference.
//
// The store lists its event's fields in one function of a Codec, which it
// runs to write a record (between Write and Commit) and which Read runs to
// read it back: the same list both ways, so that what is read back is what
// was written.
package memlog

import (
	"cmp"
	"encoding/binary"
	"slices"
)

const (
	chunkSize = 64 << 10 // the size of the chunks records are written to
	minDead   = 1024     // Compact waits for this many records dropped
)

// Log holds records, each with its event's id and seq, and the set of ids
// it holds. The zero value is not usable: use New. Not safe for concurrent
// use.
type Log struct {
	chunks     [][]byte // records: a length, then the body; at handle i<<32 | offset in chunk i
	live, dead int      // records held, and dropped since the last compaction
	strs       strTable
	ids        idSet
	refs       []ref // what records keep by reference, by seq (increasing)
	epoch      int64 // the first instant written: instants are kept relative to it
	hasEpoch   bool
	c          Codec
	scratch    []byte
	id         string // the id of the record being written, and its key
	key        idKey
}

// ref is what the record of seq keeps by reference: a value, or a refList
// of them; nil once the record is dropped.
type ref struct {
	seq uint64
	v   any
}

// refList is what a record keeps by reference when it is several values.
type refList []any

// New returns an empty Log.
func New() *Log {
	l := &Log{}
	l.strs.index = make(map[string]uint32)
	l.ids.pages = make(map[pageKey]*page)
	l.ids.other = make(map[string]struct{})
	l.c.l = l
	return l
}

// Len returns how many records the Log's chunks hold, dropped ones
// included.
func (l *Log) Len() int { return l.live + l.dead }

// Has reports whether the Log holds a record of event id.
func (l *Log) Has(id string) bool { return l.ids.has(l.ids.key(&l.strs, id, 0, false), id) }

// Write starts a record of event id: list the event's fields with the Codec
// returned, then call Commit. It returns nil if the Log holds id.
func (l *Log) Write(id string) *Codec {
	k := l.ids.key(&l.strs, id, 0, true)
	if l.ids.has(k, id) {
		return nil
	}
	c := l.c.start(false, l.scratch[:0])
	c.id(&id, k)
	l.id, l.key = id, k
	return c
}

// Commit ends the record Write started, of the event whose seq is seq
// (greater than the seq of every record before), and returns its handle.
func (l *Log) Commit(seq uint64) uint64 {
	c := &l.c
	flags := seq << 1
	if len(c.refs) > 0 {
		if n := len(l.refs); n > 0 && l.refs[n-1].seq >= seq {
			panic("memlog: seqs do not increase")
		}
		flags |= 1
		v := c.refs[0]
		if len(c.refs) > 1 {
			v = refList(slices.Clone(c.refs))
		}
		l.refs = append(l.refs, ref{seq, v})
	}
	var hdr [2 * binary.MaxVarintLen64]byte
	h := binary.AppendUvarint(binary.AppendUvarint(hdr[:0], flags), c.mask)
	at := l.write(h, c.buf)
	l.scratch = c.end()
	l.ids.add(l.key, l.id)
	l.id = ""
	l.live++
	return at
}

// Read reads back the record at handle h: it returns its event's id and
// seq, and reads into v (whose fields must be at their zero values, but for
// those fields does not list) the fields fields lists.
func Read[T any](l *Log, h uint64, v *T, fields func(*Codec, *T)) (id string, seq uint64) {
	c, seq, _ := l.open(h)
	c.id(&id, idKey{})
	fields(c, v)
	c.end()
	return id, seq
}

// Drop forgets the record at handle h: the Log no longer holds its id, nor
// what it kept by reference. Its bytes are released by Compact.
func (l *Log) Drop(h uint64) {
	c, _, refs := l.open(h)
	k, id := c.idKey()
	c.end()
	l.ids.remove(k, id)
	if refs >= 0 {
		l.refs[refs].v = nil
	}
	l.live--
	l.dead++
}

// Handles is the index of a Log's records: the handles of those it holds.
type Handles interface {
	All(func(*uint64)) // calls its function with a pointer to each handle held
	Shrink()           // called once the handles were moved
}

// Compact moves the records held to new chunks, so that the chunks of the
// ones dropped are released, when at least half of the records written
// since the last compaction (and minDead) were dropped: each record is
// moved a bounded number of times on average. It updates the handles of
// idx, then calls its Shrink.
func (l *Log) Compact(idx Handles) {
	if l.dead < minDead || l.dead < l.live {
		return
	}
	old := l.chunks
	l.chunks, l.dead = nil, 0
	idx.All(func(h *uint64) {
		r := old[*h>>32][uint32(*h):]
		n, k := binary.Uvarint(r)
		*h = l.write(nil, r[k:k+int(n)])
	})
	l.refs = slices.Clone(slices.DeleteFunc(l.refs, func(r ref) bool { return r.v == nil }))
	l.ids.shrink()
	idx.Shrink()
}

// ref returns the index in l.refs of what the record of seq keeps by
// reference.
func (l *Log) ref(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(l.refs, seq, func(r ref, seq uint64) int { return cmp.Compare(r.seq, seq) })
}

// write appends a record of body head and then body, and returns its handle.
func (l *Log) write(head, body []byte) uint64 {
	n := len(head) + len(body)
	var lenb [binary.MaxVarintLen64]byte
	ln := binary.AppendUvarint(lenb[:0], uint64(n))
	last := len(l.chunks) - 1
	if last < 0 || cap(l.chunks[last])-len(l.chunks[last]) < len(ln)+n {
		l.chunks = append(l.chunks, make([]byte, 0, max(chunkSize, len(ln)+n)))
		last++
	}
	ch := l.chunks[last]
	at := uint64(last)<<32 | uint64(len(ch))
	l.chunks[last] = append(append(append(ch, ln...), head...), body...)
	return at
}

// open starts reading the record at handle h, after its seq and mask; it
// returns the seq, and the index in l.refs of what it keeps by reference
// (-1: nothing).
func (l *Log) open(h uint64) (c *Codec, seq uint64, refs int) {
	r := l.chunks[h>>32][uint32(h):]
	n, k := binary.Uvarint(r)
	c = l.c.start(true, r[k:k+int(n)])
	var flags uint64
	c.uv(&flags)
	c.uv(&c.mask)
	seq, refs = flags>>1, -1
	if flags&1 != 0 {
		refs, _ = l.ref(seq)
		switch r := l.refs[refs].v.(type) {
		case refList:
			c.refs = append(c.refs, r...)
		default:
			c.refs = append(c.refs, r)
		}
	}
	return c, seq, refs
}
