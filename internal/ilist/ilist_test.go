package ilist

import (
	"slices"
	"testing"
)

type elem struct {
	v    int
	a, b Links[elem]
}

type byA struct{}

func (byA) Links(e *elem) *Links[elem] { return &e.a }

type byB struct{}

func (byB) Links(e *elem) *Links[elem] { return &e.b }

func values(l *List[elem, byA]) []int {
	var out []int
	for e := l.Front(); e != nil; e = e.a.Next() {
		out = append(out, e.v)
	}
	return out
}

// Elements keep their push order; any can be removed, once; an element can
// be in two lists through two links.
func TestAListKeepsItsOrderThroughRemovals(t *testing.T) {
	var l List[elem, byA]
	var other List[elem, byB]
	es := make([]*elem, 5)
	for i := range es {
		es[i] = &elem{v: i}
		l.Push(es[i])
		other.Push(es[i])
	}
	if !l.Remove(es[2]) || l.Remove(es[2]) {
		t.Fatal("Remove of a member: true once, then false")
	}
	l.Remove(es[0])
	l.Remove(es[4])
	if got := values(&l); !slices.Equal(got, []int{1, 3}) || l.Len() != 2 {
		t.Fatalf("list %v len %d, want [1 3] 2", got, l.Len())
	}
	if other.Len() != 5 {
		t.Fatalf("the other list lost members: %d", other.Len())
	}
	l.Remove(es[1])
	l.Remove(es[3])
	if l.Front() != nil || l.Len() != 0 {
		t.Fatal("not empty")
	}
	l.Push(es[2])
	if got := values(&l); !slices.Equal(got, []int{2}) {
		t.Fatalf("pushed again: %v", got)
	}
}
