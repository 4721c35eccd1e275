// Package index is the Watchdog's session index: ids to sessions, in a
// form the garbage collector scans cheaply.
package index

import "hash/maphash"

// Index maps ids to the values a Watchdog watches (its sessions). Its hash
// table holds no pointer (a hash of the id to a slot number) and the values
// are held by a slice, so a garbage collection does not scan the table and
// reaches the values in slot order, not in hash order (which at a million
// sessions made most of a full collection). A value keeps its slot (see
// Slot), so removing it walks no chain. The hash-to-slot table is a Go map,
// whose growth is incremental: no insert pauses the Watchdog for a rehash.
// Not safe for concurrent use: the Watchdog's mu guards it. Set Key and
// Slot before use.
type Index[V any] struct {
	// Key is a value's id; Slot is where the value keeps its slot.
	Key  func(*V) string
	Slot func(*V) *int32

	seed   maphash.Seed
	byHash map[uint64]int32 // hash of an id -> first slot of its chain
	slots  []*V             // nil: a free slot
	next   []int32          // the next slot in the same chain, or -1
	prev   []int32          // the previous slot in the same chain, or -1 for its first
	free   []int32          // free slots
	n      int
	hashOf func(string) uint64 // tests only: forces collisions
}

func (x *Index[V]) hash(id string) uint64 {
	if x.byHash == nil {
		x.seed = maphash.MakeSeed()
		x.byHash = make(map[uint64]int32)
	}
	if x.hashOf != nil {
		return x.hashOf(id)
	}
	return maphash.String(x.seed, id)
}

// Get returns the value under id, or nil.
func (x *Index[V]) Get(id string) *V {
	if x.n == 0 {
		return nil
	}
	i, ok := x.byHash[x.hash(id)]
	for ok && i >= 0 {
		if s := x.slots[i]; x.Key(s) == id {
			return s
		}
		i = x.next[i]
	}
	return nil
}

// Put adds s under its key; the caller has checked that the key is free.
func (x *Index[V]) Put(s *V) {
	h := x.hash(x.Key(s))
	var i int32
	if n := len(x.free); n > 0 {
		i, x.free = x.free[n-1], x.free[:n-1]
	} else {
		i = int32(len(x.slots))
		x.slots = append(x.slots, nil)
		x.next = append(x.next, -1)
		x.prev = append(x.prev, -1)
	}
	x.slots[i] = s
	x.next[i], x.prev[i] = -1, -1
	*x.Slot(s) = i
	if first, ok := x.byHash[h]; ok {
		x.next[i], x.prev[first] = first, i
	}
	x.byHash[h] = i
	x.n++
}

// Del removes s if it is the value under its key; the slot s keeps tells
// at once whether it is, and its chain links where it is: the table is
// touched only when s is the first of its chain.
func (x *Index[V]) Del(s *V) {
	if x.n == 0 {
		return
	}
	i := *x.Slot(s)
	if i < 0 || int(i) >= len(x.slots) || x.slots[i] != s {
		return // not in the index
	}
	p, n := x.prev[i], x.next[i]
	switch {
	case p >= 0:
		x.next[p] = n
	case n >= 0:
		x.byHash[x.hash(x.Key(s))] = n
	default:
		delete(x.byHash, x.hash(x.Key(s)))
	}
	if n >= 0 {
		x.prev[n] = p
	}
	x.slots[i] = nil
	x.n--
	if x.n == 0 {
		if cap(x.slots) > 1024 { // give a burst's memory back
			x.Reset()
		} else {
			x.slots, x.next, x.prev, x.free = x.slots[:0], x.next[:0], x.prev[:0], x.free[:0]
		}
		return
	}
	x.free = append(x.free, i)
}

// Len returns the number of values.
func (x *Index[V]) Len() int { return x.n }

// All returns the values, in slot order.
func (x *Index[V]) All() []*V {
	out := make([]*V, 0, x.n)
	for _, s := range x.slots {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Reset removes every value.
func (x *Index[V]) Reset() {
	*x = Index[V]{Key: x.Key, Slot: x.Slot, seed: x.seed, byHash: make(map[uint64]int32), hashOf: x.hashOf}
}
