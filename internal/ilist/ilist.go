// Package ilist is an intrusive doubly linked list: the links live in the
// elements themselves, so that removing an element is O(1) and allocates
// nothing. An element may be in several lists through several Links, each
// list picking its own through an accessor type A.
package ilist

// Links are an element's links in one list. The zero value is in no list.
type Links[T any] struct {
	prev, next *T
	in         bool
}

// Next is the element after the one these links belong to, nil at the end.
func (k *Links[T]) Next() *T { return k.next }

// Accessor picks an element's Links for one list; implement it on a
// zero-size type.
type Accessor[T any] interface{ Links(*T) *Links[T] }

// List is a list of elements, in the order they were pushed. The zero
// value is empty. Not safe for concurrent use.
type List[T any, A Accessor[T]] struct {
	head, tail *T
	n          int
}

// Len is the number of elements in the list.
func (l *List[T, A]) Len() int { return l.n }

// Front is the first element pushed and still in the list, nil if none.
func (l *List[T, A]) Front() *T { return l.head }

// Push appends x, which must be in no list through A's links.
func (l *List[T, A]) Push(x *T) {
	var a A
	k := a.Links(x)
	k.prev, k.next, k.in = l.tail, nil, true
	if l.tail != nil {
		a.Links(l.tail).next = x
	} else {
		l.head = x
	}
	l.tail = x
	l.n++
}

// Remove takes x out of the list if it is in it, and reports whether it
// was.
func (l *List[T, A]) Remove(x *T) bool {
	var a A
	k := a.Links(x)
	if !k.in {
		return false
	}
	if k.prev != nil {
		a.Links(k.prev).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		a.Links(k.next).prev = k.prev
	} else {
		l.tail = k.prev
	}
	*k = Links[T]{}
	l.n--
	return true
}
