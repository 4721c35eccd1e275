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
