package memlog

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Codec writes the fields of a record (between Log.Write and Log.Commit) or
// reads them back (in Read). Its methods take pointers to fields: writing,
// they keep the values; reading, they set them. A record lists at most 64
// fields, each of which costs a bit of the record's mask when at its zero
// value (nil for a pointer, a slice or a map), and its value's bytes
// otherwise. The entries of a Slice have their own mask, of at most 8
// fields.
type Codec struct {
	l     *Log
	dec   bool
	buf   []byte // writing: the fields so far; reading: the bytes left
	mask  uint64 // the fields set: bit i for the i-th field listed
	bit   uint
	limit uint // the number of fields mask holds
	slot  int  // the fields listed so far, entries' included: a string's slot in the intern cache
	refs  []any
	base  int64 // the record's first instant: the others are kept relative to it
	based bool
	// the record's first floats written out, which later ones may repeat
	floats [8]uint64
	nf     int
}

func (c *Codec) start(dec bool, buf []byte) *Codec {
	c.end() // if the last record panicked
	c.dec, c.buf, c.mask, c.bit, c.limit, c.slot = dec, buf, 0, 0, 64, 1
	c.based, c.nf = false, 0
	return c
}

// end releases what the Codec refers to and returns its buffer.
func (c *Codec) end() []byte {
	b := c.buf
	clear(c.refs)
	c.buf, c.refs = nil, c.refs[:0]
	return b[:0]
}

// field reports whether the next field is set: writing, whether set; reading,
// whether it was.
func (c *Codec) field(set bool) bool {
	if c.bit >= c.limit {
		panic("memlog: more fields than a mask holds (64 in a record, 8 in a Slice's entry)")
	}
	b := uint64(1) << c.bit
	c.bit++
	c.slot++
	if c.dec {
		return c.mask&b != 0
	}
	if set {
		c.mask |= b
	}
	return set
}

// uv writes *p, or reads it.
func (c *Codec) uv(p *uint64) {
	if !c.dec {
		c.buf = binary.AppendUvarint(c.buf, *p)
		return
	}
	x, n := binary.Uvarint(c.buf)
	if n <= 0 {
		panic("memlog: corrupt record")
	}
	*p, c.buf = x, c.buf[n:]
}

// Strs lists string fields that take few distinct values (names): they are
// interned (while the Log's table has room, see maxInterned).
func (c *Codec) Strs(ps ...*string) {
	for _, p := range ps {
		if c.field(*p != "") {
			c.str(p, true)
		}
	}
}

// Texts lists string fields of any value: they are kept as they are.
func (c *Codec) Texts(ps ...*string) {
	for _, p := range ps {
		if c.field(*p != "") {
			c.str(p, false)
		}
	}
}

// str writes or reads a string: 0 for "", an interned one's index i as
// 2i+1, or any other's length n as 2n followed by its bytes.
func (c *Codec) str(p *string, intern bool) {
	var x uint64
	if !c.dec && *p != "" {
		x = uint64(len(*p)) << 1
		if intern {
			if i, ok := c.l.strs.find(*p, c.slot, true); ok {
				x = uint64(i)<<1 | 1
			}
		}
	}
	c.uv(&x)
	c.strBody(p, x)
}

// strBody writes or reads what follows a string's code x.
func (c *Codec) strBody(p *string, x uint64) {
	switch {
	case x&1 != 0:
		if c.dec {
			*p = c.l.strs.list[x>>1]
		}
	case !c.dec:
		c.buf = append(c.buf, *p...)
	case x > 0:
		*p, c.buf = string(c.buf[:x>>1]), c.buf[x>>1:]
	}
}

// IDs lists fields that hold event ids: one made of a prefix and a counter
// is kept as its prefix, interned, and the counter.
func (c *Codec) IDs(ps ...*string) {
	for _, p := range ps {
		if c.field(*p != "") {
			var k idKey
			if !c.dec {
				k = c.l.ids.key(&c.l.strs, *p, c.slot, true)
			}
			c.id(p, k)
		}
	}
}

// id writes an id whose key is k, or reads one: as its interned prefix (as
// str writes it) followed by its counter, or as str writes a string that is
// not interned.
func (c *Codec) id(p *string, k idKey) {
	if !c.dec && !k.ok {
		c.str(p, false)
		return
	}
	x := uint64(k.prefix)<<1 | 1
	c.uv(&x)
	if x&1 == 0 {
		c.strBody(p, x)
		return
	}
	n := k.n
	c.uv(&n)
	if c.dec {
		*p = c.l.strs.list[x>>1] + strconv.FormatUint(n, 10)
	}
}

// idKey reads an id that id wrote: its key, or the id itself if it has no
// key.
func (c *Codec) idKey() (k idKey, id string) {
	var x uint64
	c.uv(&x)
	if x&1 == 0 {
		c.strBody(&id, x)
		return k, id
	}
	k.prefix, k.ok = uint32(x>>1), true
	c.uv(&k.n)
	return k, ""
}

// Ints lists int fields.
func (c *Codec) Ints(ps ...*int) {
	for _, p := range ps {
		if c.field(*p != 0) {
			x := uint64(*p<<1) ^ uint64(*p>>(bits.UintSize-1)) // zigzag
			c.uv(&x)
			if c.dec {
				*p = int(x>>1) ^ -int(x&1)
			}
		}
	}
}

// Uints lists uint64 fields.
func (c *Codec) Uints(ps ...*uint64) {
	for _, p := range ps {
		if c.field(*p != 0) {
			c.uv(p)
		}
	}
}

// Floats lists float64 fields, kept bit for bit (-0 and NaNs included): a
// byte that says which of the record's floats so far it repeats, or how many
// of its bytes follow (the high ones: 1 takes 2 bytes, 0.5 or 30 three).
func (c *Codec) Floats(ps ...*float64) {
	for _, p := range ps {
		v := math.Float64bits(*p)
		if !c.field(v != 0) {
			continue
		}
		var x uint64 // below len(c.floats): c.floats[x]; else x-len(c.floats) bytes follow
		if c.dec {
			v = 0
		} else {
			x = uint64(len(c.floats) + 8 - bits.TrailingZeros64(v)/8)
			for i, f := range c.floats[:c.nf] {
				if f == v {
					x = uint64(i)
					break
				}
			}
		}
		c.uv(&x)
		if x < uint64(len(c.floats)) {
			v = c.floats[x]
		} else {
			n := int(x) - len(c.floats)
			if !c.dec {
				c.buf = binary.BigEndian.AppendUint64(c.buf, v)[:len(c.buf)+n]
			} else {
				for i, b := range c.buf[:n] {
					v |= uint64(b) << (56 - 8*i)
				}
				c.buf = c.buf[n:]
			}
			if c.nf < len(c.floats) {
				c.floats[c.nf] = v
				c.nf++
			}
		}
		if c.dec {
			*p = math.Float64frombits(v)
		}
	}
}

// Bools lists bool fields: a field set is true.
func (c *Codec) Bools(ps ...*bool) {
	for _, p := range ps {
		if c.field(*p) && c.dec {
			*p = true
		}
	}
}

// BoolPtr lists a *bool field.
func (c *Codec) BoolPtr(p **bool) {
	if !c.field(*p != nil) {
		return
	}
	var x uint64
	if !c.dec && **p {
		x = 1
	}
	c.uv(&x)
	if c.dec {
		v := x != 0
		*p = &v
	}
}

// Bytes lists a []byte field.
func (c *Codec) Bytes(p *[]byte) {
	if !c.field(*p != nil) {
		return
	}
	n := uint64(len(*p))
	c.uv(&n)
	if !c.dec {
		c.buf = append(c.buf, *p...)
		return
	}
	*p, c.buf = append(make([]byte, 0, n), c.buf[:n]...), c.buf[n:]
}

// Times lists time.Time fields.
func (c *Codec) Times(ps ...*time.Time) {
	for _, p := range ps {
		if c.field(*p != time.Time{}) {
			c.time(p)
		}
	}
}

// TimePtr lists a *time.Time field.
func (c *Codec) TimePtr(p **time.Time) {
	if !c.field(*p != nil) {
		return
	}
	if c.dec {
		*p = new(time.Time)
	}
	c.time(*p)
}

// time writes or reads an instant: 0 for the zero time.Time; 4i+1 for the
// record's reference i; 4z+2 for an instant in UTC without a monotonic
// reading, z being its nanoseconds relative to the record's first such
// instant (the first one: to the Log's first), zigzagged, below 2^62 (73
// years either side). Another time.Time is kept by reference.
func (c *Codec) time(p *time.Time) {
	var x uint64
	if !c.dec && *p != (time.Time{}) {
		ns := p.UnixNano()
		exact := *p == time.Unix(0, ns).UTC()
		if exact && !c.l.hasEpoch {
			c.l.epoch, c.l.hasEpoch = ns, true
		}
		d := ns - c.origin()
		if z := uint64(d<<1) ^ uint64(d>>63); exact && (d >= 0) == (ns >= c.origin()) && z < 1<<62 {
			x = z<<2 | 2
		} else {
			x = c.ref(*p)<<2 | 1
		}
	}
	c.uv(&x)
	if x&3 == 2 {
		z := x >> 2
		ns := c.origin() + (int64(z>>1) ^ -int64(z&1))
		if c.dec {
			*p = time.Unix(0, ns).UTC()
		}
		if !c.based {
			c.base, c.based = ns, true
		}
		return
	}
	if c.dec && x&3 == 1 {
		*p = c.refs[x>>2].(time.Time)
	} else if c.dec {
		*p = time.Time{}
	}
}

// origin is the instant the next one is kept relative to.
func (c *Codec) origin() int64 {
	if c.based {
		return c.base
	}
	return c.l.epoch
}

// ref keeps v by reference and returns its index in the record's references.
func (c *Codec) ref(v any) uint64 {
	c.refs = append(c.refs, v)
	return uint64(len(c.refs) - 1)
}

// Ref lists a field that holds pointers (a pointer, a map), set or not as
// set says: its value is kept by reference.
func Ref[T any](c *Codec, p *T, set bool) {
	if !c.field(set) {
		return
	}
	var i uint64
	if !c.dec {
		i = c.ref(*p)
	}
	c.uv(&i)
	if c.dec {
		*p = c.refs[i].(T)
	}
}

// Slice lists a slice field, each of whose entries each lists the fields of:
// at most 8, which one byte of the entry's own mask holds.
func Slice[T any](c *Codec, p *[]T, each func(*Codec, *T)) {
	if !c.field(*p != nil) {
		return
	}
	n := uint64(len(*p))
	c.uv(&n)
	if c.dec {
		*p = make([]T, n)
	}
	mask, bit, limit := c.mask, c.bit, c.limit
	for i := range *p {
		c.mask, c.bit, c.limit = 0, 0, 8
		at := len(c.buf)
		if c.dec {
			c.mask, c.buf = uint64(c.buf[0]), c.buf[1:]
		} else {
			c.buf = append(c.buf, 0)
		}
		each(c, &(*p)[i])
		if !c.dec {
			c.buf[at] = byte(c.mask)
		}
	}
	c.mask, c.bit, c.limit = mask, bit, limit
}
