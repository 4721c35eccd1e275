package sched

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// The cost of scheduling and popping one item with 100,000 items scheduled,
// the items scattered over memory as a Watchdog's sessions are: this heap
// beside container/heap over item pointers (the binary heap a user would
// write, which also keeps each item's position in the item).
//
//	go test -run '^$' -bench . -benchmem ./internal/sched

const benchItems = 100_000

// scattered returns n items, each in its own allocation padded to a
// Session's size, in random order.
func scattered[T any](n int, mk func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = mk()
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

type paddedItem struct {
	Item[int]
	_ [256]byte
}

func BenchmarkHeapPushPopDue(b *testing.B) {
	items := scattered(benchItems, func() *paddedItem { return new(paddedItem) })
	var h Heap[int]
	r := rand.New(rand.NewPCG(3, 4))
	for _, it := range items {
		h.Push(&it.Item, r.Int64N(1<<40))
	}
	b.ReportAllocs()
	for b.Loop() {
		it := h.PopDue(1 << 62)
		h.Push(it, it.Due+r.Int64N(1<<40))
	}
}

type naiveItem struct {
	due   int64
	index int
	_     [256]byte
}

type naiveHeap []*naiveItem

func (h naiveHeap) Len() int           { return len(h) }
func (h naiveHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h naiveHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *naiveHeap) Push(x any) { it := x.(*naiveItem); it.index = len(*h); *h = append(*h, it) }
func (h *naiveHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func BenchmarkNaiveContainerHeapPushPop(b *testing.B) {
	items := scattered(benchItems, func() *naiveItem { return new(naiveItem) })
	var h naiveHeap
	r := rand.New(rand.NewPCG(3, 4))
	for _, it := range items {
		it.due = r.Int64N(1 << 40)
		heap.Push(&h, it)
	}
	b.ReportAllocs()
	for b.Loop() {
		it := heap.Pop(&h).(*naiveItem)
		it.due += r.Int64N(1 << 40)
		heap.Push(&h, it)
	}
}
