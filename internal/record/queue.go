package record

// queue is a FIFO addressed by stable positions: the items at positions
// [head, end) are queued. It is stored in fixed-size chunks, so that growing
// it never copies the items already queued, and an item's address holds
// until it is removed. Positions restart at zero only in compact, when the
// queue is empty. Not safe for concurrent use.
type queue[T any] struct {
	chunks [][]T // chunks[k][j] is position off + k*chunkLen + j
	off    int
	head   int
	end    int
	spare  []T // one drained chunk, kept for reuse
}

const chunkLen = 64

func (q *queue[T]) at(i int) *T {
	i -= q.off
	return &q.chunks[i/chunkLen][i%chunkLen]
}

func (q *queue[T]) push(v T) {
	if q.end-q.off == len(q.chunks)*chunkLen {
		c := q.spare
		q.spare = nil
		if c == nil {
			c = make([]T, chunkLen)
		}
		q.chunks = append(q.chunks, c)
	}
	*q.at(q.end) = v
	q.end++
}

// remove removes the item at position i: the items before it move up one
// position, so removing the head moves nothing.
func (q *queue[T]) remove(i int) {
	for j := i; j > q.head; j-- {
		*q.at(j) = *q.at(j - 1)
	}
	var zero T
	*q.at(q.head) = zero
	q.head++
	if q.head-q.off == chunkLen { // the first chunk is drained
		q.spare = q.chunks[0]
		n := copy(q.chunks, q.chunks[1:]) // keeps the list's capacity
		q.chunks[n] = nil
		q.chunks = q.chunks[:n]
		q.off += chunkLen
	}
}

// compact restarts positions at zero when the queue is empty.
func (q *queue[T]) compact() {
	if q.head != q.end {
		return
	}
	if len(q.chunks) > 0 {
		q.spare = q.chunks[0]
	}
	clear(q.chunks)
	q.chunks = q.chunks[:0]
	q.off, q.head, q.end = 0, 0, 0
}
