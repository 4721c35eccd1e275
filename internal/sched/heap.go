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
	index int // 1-based position in the heap; 0 means not in the heap
}

// Scheduled reports whether the item is in a heap.
func (it *Item[T]) Scheduled() bool { return it.index > 0 }

// Heap is a min-heap of items ordered by Due. The zero value is empty and
// ready to use.
type Heap[T any] struct {
	items []*Item[T]
}

// Len returns the number of scheduled items.
func (h *Heap[T]) Len() int { return len(h.items) }

// Peek returns the earliest item, or nil when the heap is empty.
func (h *Heap[T]) Peek() *Item[T] {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// Push schedules it at due. If it is already scheduled it is moved.
func (h *Heap[T]) Push(it *Item[T], due int64) {
	if it.index > 0 {
		it.Due = due
		h.fix(it.index - 1)
		return
	}
	it.Due = due
	h.items = append(h.items, it)
	it.index = len(h.items)
	h.up(len(h.items) - 1)
}

// Remove unschedules it; removing an unscheduled item is a no-op.
func (h *Heap[T]) Remove(it *Item[T]) {
	if it.index == 0 {
		return
	}
	i := it.index - 1
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	it.index = 0
	if i != last {
		h.fix(i)
	}
	if cap(h.items) > 64 && len(h.items) < cap(h.items)/4 {
		h.items = append(make([]*Item[T], 0, cap(h.items)/2), h.items...)
	}
}

// PopDue removes and returns the earliest item if it is due at or before now,
// or nil otherwise.
func (h *Heap[T]) PopDue(now int64) *Item[T] {
	if len(h.items) == 0 || h.items[0].Due > now {
		return nil
	}
	it := h.items[0]
	h.Remove(it)
	return it
}

func (h *Heap[T]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *Heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index = i + 1
	h.items[j].index = j + 1
}

func (h *Heap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h.items[i].Due <= h.items[j].Due {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap[T]) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.items[r].Due < h.items[l].Due {
			j = r
		}
		if h.items[j].Due >= h.items[i].Due {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
