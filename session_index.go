package watchdog

import "hash/maphash"

// sessionIndex maps session ids to the sessions a Watchdog watches. It is
// an open-addressing hash table of slot numbers (linear probing, deletion by
// backward shift, so no tombstones), over a slot slice that holds the
// sessions and a parallel slice of their ids' hashes. The table and the
// hashes hold no pointer: a garbage collection does not scan them and
// reaches the sessions in slot order. A map[string]*Session made the
// collector visit a million sessions and their ids in hash order, cache miss
// after cache miss: it was most of a full GC cycle at 1,000,000 sessions. A
// session keeps its slot number (in item.Aux), so removing a fired session
// neither hashes its id nor reads it (see BENCHMARKS.md). Not safe for
// concurrent use: the Watchdog's mu guards it.
type sessionIndex struct {
	seed   maphash.Seed
	table  []int32    // 0: empty; else 1 + a slot. A power of two long, at most half full.
	slots  []*Session // nil: a free slot
	hashes []uint64   // hashes[i] is the hash of slots[i]'s id
	free   []int32    // free slots
	n      int
	hashOf func(string) uint64 // tests only: forces collisions
}

// minTable is the table's length once anything is put.
const minTable = 16

func (x *sessionIndex) hash(id string) uint64 {
	if x.hashOf != nil {
		return x.hashOf(id)
	}
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	return maphash.String(x.seed, id)
}

// get returns the session watched under id, or nil.
func (x *sessionIndex) get(id string) *Session {
	if x.n == 0 {
		return nil
	}
	h := x.hash(id)
	mask := uint64(len(x.table) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		t := x.table[p]
		if t == 0 {
			return nil
		}
		if i := t - 1; x.hashes[i] == h && x.slots[i].id == id {
			return x.slots[i]
		}
	}
}

// put adds s under s.id; the caller has checked that the id is free.
func (x *sessionIndex) put(s *Session) {
	if 2*(x.n+1) > len(x.table) {
		x.grow()
	}
	h := x.hash(s.id)
	var i int32
	if n := len(x.free); n > 0 {
		i, x.free = x.free[n-1], x.free[:n-1]
	} else {
		i = int32(len(x.slots))
		x.slots = append(x.slots, nil)
		x.hashes = append(x.hashes, 0)
	}
	x.slots[i], x.hashes[i] = s, h
	s.item.Aux = i
	x.insert(i)
	x.n++
}

// insert puts slot i in the table at the first empty place from its hash's.
func (x *sessionIndex) insert(i int32) {
	mask := uint64(len(x.table) - 1)
	p := x.hashes[i] & mask
	for x.table[p] != 0 {
		p = (p + 1) & mask
	}
	x.table[p] = i + 1
}

// grow doubles the table (at least minTable) and puts every slot back.
func (x *sessionIndex) grow() {
	x.table = make([]int32, max(2*len(x.table), minTable))
	for i, s := range x.slots {
		if s != nil {
			x.insert(int32(i))
		}
	}
}

// del removes s if it is the session watched under s.id. It finds s from
// the slot s keeps and the hash kept for that slot: no hashing of the id,
// whose bytes are likely out of the caches when a session fires.
func (x *sessionIndex) del(s *Session) {
	slot := s.item.Aux
	if x.n == 0 || slot < 0 || int(slot) >= len(x.slots) || x.slots[slot] != s {
		return // not in the index
	}
	mask := uint64(len(x.table) - 1)
	p := x.hashes[slot] & mask
	for x.table[p] != slot+1 {
		p = (p + 1) & mask
	}
	// Backward shift: move up every later entry of the probe run that
	// may live at p, so that no lookup stops early at the hole.
	for j := p; ; {
		j = (j + 1) & mask
		t := x.table[j]
		if t == 0 {
			break
		}
		home := x.hashes[t-1] & mask
		// The entry at j stays if its home is cyclically in (p, j].
		if p <= j && p < home && home <= j || p > j && (p < home || home <= j) {
			continue
		}
		x.table[p] = t
		p = j
	}
	x.table[p] = 0
	x.slots[slot] = nil
	x.n--
	if x.n == 0 {
		if cap(x.slots) > 1024 { // give a burst's memory back
			x.reset()
		} else {
			clear(x.table)
			x.slots, x.hashes, x.free = x.slots[:0], x.hashes[:0], x.free[:0]
		}
		return
	}
	x.free = append(x.free, slot)
}

// len returns the number of sessions.
func (x *sessionIndex) len() int { return x.n }

// all returns the sessions, in slot order.
func (x *sessionIndex) all() []*Session {
	out := make([]*Session, 0, x.n)
	for _, s := range x.slots {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// reset removes every session.
func (x *sessionIndex) reset() {
	*x = sessionIndex{seed: x.seed, hashOf: x.hashOf}
}
