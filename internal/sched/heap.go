// Package sched holds the deadline heap that drives a Watchdog's single
// scheduler goroutine. It is not safe for concurrent use: the owner guards it.
package sched

// Item is one entry of a Heap. Embed it by value in the object it schedules;
// its zero value is "not scheduled".
type Item[T any] struct {
	// Due is the instant, in Unix nanoseconds, at which the item is due.
	Due int64
	// Value is what the item schedules.
	Value T
	index int32 // 1-based position in the heap; 0 means not in the heap
	// Aux is not used by the heap: the owner may keep a small value of
	// its own there, in what would otherwise be padding.
	Aux int32
}

// Scheduled reports whether the item is in a heap.
func (it *Item[T]) Scheduled() bool { return it.index > 0 }

// Heap is a min-heap of items ordered by Due. The zero value is empty and
// ready to use.
//
// It is 4-ary and keeps each item's due instant beside its pointer, so that
// sifting compares values in one contiguous array and touches an item only
// to record its new position: with a million items scattered in memory, a
// binary heap of bare pointers takes a cache miss per comparison.
type Heap[T any] struct {
	entries []entry[T]
}

type entry[T any] struct {
	due int64
	it  *Item[T]
}

// arity is the number of children of a node.
const arity = 4

// Len returns the number of scheduled items.
func (h *Heap[T]) Len() int { return len(h.entries) }

// Peek returns the earliest item, or nil when the heap is empty.
func (h *Heap[T]) Peek() *Item[T] {
	if len(h.entries) == 0 {
		return nil
	}
	return h.entries[0].it
}

// Push schedules it at due. If it is already scheduled it is moved.
func (h *Heap[T]) Push(it *Item[T], due int64) {
	it.Due = due
	if it.index > 0 {
		i := int(it.index - 1)
		h.entries[i].due = due
		h.fix(i)
		return
	}
	h.entries = append(h.entries, entry[T]{due, it})
	it.index = int32(len(h.entries))
	h.up(len(h.entries) - 1)
}

// Remove unschedules it; it does nothing if it is not scheduled.
func (h *Heap[T]) Remove(it *Item[T]) {
	if it.index == 0 {
		return
	}
	i := int(it.index - 1)
	last := len(h.entries) - 1
	it.index = 0
	if i != last {
		h.entries[i] = h.entries[last]
		h.entries[i].it.index = int32(i + 1)
	}
	h.entries[last] = entry[T]{}
	h.entries = h.entries[:last]
	if i != last {
		h.fix(i)
	}
	if cap(h.entries) > 64 && len(h.entries) < cap(h.entries)/4 {
		h.entries = append(make([]entry[T], 0, cap(h.entries)/2), h.entries...)
	}
}

// PopDue removes and returns the earliest item if it is due at now (Due <=
// now), or returns nil.
func (h *Heap[T]) PopDue(now int64) *Item[T] {
	if len(h.entries) == 0 || h.entries[0].due > now {
		return nil
	}
	it := h.entries[0].it
	h.Remove(it)
	return it
}

func (h *Heap[T]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// up moves the entry at j towards the root until its parent is not later.
func (h *Heap[T]) up(j int) {
	e := h.entries[j]
	for j > 0 {
		p := (j - 1) / arity
		if h.entries[p].due <= e.due {
			break
		}
		h.entries[j] = h.entries[p]
		h.entries[j].it.index = int32(j + 1)
		j = p
	}
	h.entries[j] = e
	e.it.index = int32(j + 1)
}

// down moves the entry at i0 towards the leaves until no child is earlier;
// it reports whether the entry moved.
func (h *Heap[T]) down(i0 int) bool {
	n := len(h.entries)
	e := h.entries[i0]
	i := i0
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		m := first
		for c := first + 1; c < min(first+arity, n); c++ {
			if h.entries[c].due < h.entries[m].due {
				m = c
			}
		}
		if h.entries[m].due >= e.due {
			break
		}
		h.entries[i] = h.entries[m]
		h.entries[i].it.index = int32(i + 1)
		i = m
	}
	if i == i0 {
		return false
	}
	h.entries[i] = e
	e.it.index = int32(i + 1)
	return true
}
