package record

import (
	"strconv"
	"sync/atomic"
)

// IDs hands out event ids: a prefix followed by a sequence number from 1.
// Next takes a number without allocating; String formats it when the event
// is built. Safe for concurrent use.
type IDs struct {
	Prefix string
	seq    atomic.Uint64
}

// Next returns the next sequence number.
func (x *IDs) Next() uint64 { return x.seq.Add(1) }

// String returns the id of sequence number n.
func (x *IDs) String(n uint64) string { return x.Prefix + strconv.FormatUint(n, 10) }

// Pair returns the ids of sequence numbers a and b, formatted into one
// string: one allocation for the two ids of a fire.
func (x *IDs) Pair(a, b uint64) (string, string) {
	var buf [2*20 + 2*32]byte
	s := strconv.AppendUint(append(buf[:0], x.Prefix...), a, 10)
	n := len(s)
	s = strconv.AppendUint(append(s, x.Prefix...), b, 10)
	both := string(s)
	return both[:n], both[n:]
}
