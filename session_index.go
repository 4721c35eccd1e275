package watchdog

import "hash/maphash"

// sessionIndex maps session ids to the sessions a Watchdog watches. Its hash
// table holds no pointer (a hash of the id to a slot number), and the
// sessions are held by a slice: a garbage collection does not scan the table
// and reaches the sessions in slot order. A map[string]*Session made the
// collector visit a million sessions and their ids in hash order, cache miss
// after cache miss: it was most of a full GC cycle at 1,000,000 sessions
// (see BENCHMARKS.md). A session keeps its slot (in item.Aux), so removing
// it walks no chain. (Keeping each slot's hash too, to spare hashing the id
// on removal, cost 8 bytes a session, more than the memory target allowed.)
// The hash-to-slot table stays a Go map, whose growth is incremental:
// an open-addressing table measured faster per removal, but doubling it at
// a million sessions held the Watchdog's lock for 20 ms. Not safe for
// concurrent use: the Watchdog's mu guards it.
type sessionIndex struct {
	seed   maphash.Seed
	byHash map[uint64]int32 // hash of an id -> first slot of its chain
	slots  []*Session       // nil: a free slot; a session's slot is in its item.Aux
	next   []int32          // the next slot in the same chain, or -1
	free   []int32          // free slots
	n      int
	hashOf func(string) uint64 // tests only: forces collisions
}

func (x *sessionIndex) hash(id string) uint64 {
	if x.byHash == nil {
		x.seed = maphash.MakeSeed()
		x.byHash = make(map[uint64]int32)
	}
	if x.hashOf != nil {
		return x.hashOf(id)
	}
	return maphash.String(x.seed, id)
}

// get returns the session watched under id, or nil.
func (x *sessionIndex) get(id string) *Session {
	if x.n == 0 {
		return nil
	}
	i, ok := x.byHash[x.hash(id)]
	for ok && i >= 0 {
		if s := x.slots[i]; s.id == id {
			return s
		}
		i = x.next[i]
	}
	return nil
}

// put adds s under s.id; the caller has checked that the id is free.
func (x *sessionIndex) put(s *Session) {
	h := x.hash(s.id)
	var i int32
	if n := len(x.free); n > 0 {
		i, x.free = x.free[n-1], x.free[:n-1]
	} else {
		i = int32(len(x.slots))
		x.slots = append(x.slots, nil)
		x.next = append(x.next, -1)
	}
	x.slots[i] = s
	x.next[i] = -1
	s.item.Aux = i
	if first, ok := x.byHash[h]; ok {
		x.next[i] = first
	}
	x.byHash[h] = i
	x.n++
}

// del removes s if it is the session watched under s.id; the slot s keeps
// tells at once whether it is.
func (x *sessionIndex) del(s *Session) {
	if x.n == 0 {
		return
	}
	slot := s.item.Aux
	if slot < 0 || int(slot) >= len(x.slots) || x.slots[slot] != s {
		return // not in the index
	}
	h := x.hash(s.id)
	i, ok := x.byHash[h]
	prev := int32(-1)
	for ok && i >= 0 {
		if x.slots[i] == s {
			switch {
			case prev >= 0:
				x.next[prev] = x.next[i]
			case x.next[i] >= 0:
				x.byHash[h] = x.next[i]
			default:
				delete(x.byHash, h)
			}
			x.slots[i] = nil
			x.n--
			if x.n == 0 {
				if cap(x.slots) > 1024 { // give a burst's memory back
					x.reset()
				} else {
					x.slots, x.next, x.free = x.slots[:0], x.next[:0], x.free[:0]
				}
				return
			}
			x.free = append(x.free, i)
			return
		}
		prev, i = i, x.next[i]
	}
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
	*x = sessionIndex{seed: x.seed, byHash: make(map[uint64]int32), hashOf: x.hashOf}
}
