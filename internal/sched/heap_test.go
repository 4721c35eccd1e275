package sched

import (
	"math/rand/v2"
	"sort"
	"testing"
)

func TestHeapPopsInDueOrderAcrossPushMoveRemove(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Heap[int]
	items := make([]*Item[int], 500)
	for i := range items {
		items[i] = &Item[int]{Value: i}
		h.Push(items[i], r.Int64N(1000))
	}
	// Move some, remove some.
	for i := 0; i < 100; i++ {
		h.Push(items[r.IntN(len(items))], r.Int64N(1000))
	}
	removed := map[int]bool{}
	for i := 0; i < 100; i++ {
		k := r.IntN(len(items))
		h.Remove(items[k])
		h.Remove(items[k]) // idempotent
		removed[k] = true
	}
	var want []int64
	for i, it := range items {
		if !removed[i] {
			want = append(want, it.Due)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if h.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", h.Len(), len(want))
	}
	for i, d := range want {
		it := h.PopDue(1 << 62)
		if it == nil || it.Due != d {
			t.Fatalf("pop %d: got %v, want due %d", i, it, d)
		}
		if it.Scheduled() {
			t.Fatalf("popped item still scheduled")
		}
	}
	if h.PopDue(1<<62) != nil || h.Peek() != nil {
		t.Fatal("heap not empty")
	}
}

func TestHeapPopDueLeavesFutureItems(t *testing.T) {
	var h Heap[string]
	a, b := &Item[string]{Value: "a"}, &Item[string]{Value: "b"}
	h.Push(a, 10)
	h.Push(b, 20)
	if got := h.PopDue(9); got != nil {
		t.Fatalf("PopDue(9) = %v, want nil", got.Value)
	}
	if got := h.PopDue(10); got != a {
		t.Fatalf("PopDue(10) = %v, want a", got)
	}
	if got := h.PopDue(15); got != nil {
		t.Fatalf("PopDue(15) = %v, want nil", got.Value)
	}
	if h.Peek() != b {
		t.Fatal("Peek != b")
	}
}
