package watchdog

import (
	"strconv"
	"sync"
)

// eventIDs hands out event ids: a prefix followed by a sequence number that
// starts at 1. The ids are formatted a block at a time into one string and
// handed out as slices of it, so that most events cost no allocation for
// their id (a Start and a Stop used to allocate one string each). An id that
// outlives its event keeps its block (at most about 1 KB) alive. Safe for
// concurrent use.
type eventIDs struct {
	prefix string
	mu     sync.Mutex
	seq    uint64             // the last sequence number formatted
	block  string             // the current block's ids, back to back
	ends   [idBlockMax]uint32 // ends[i] is the end of the block's i-th id
	n      int                // ids in the block
	next   int                // the next id to hand out
	buf    []byte             // formatting scratch
}

// idBlockMax is the most ids formatted at once; idBlockBytes bounds a
// block's size, so a long prefix gets fewer ids per block.
const (
	idBlockMax   = 32
	idBlockBytes = 1024
)

// nextID returns the next event id.
func (x *eventIDs) nextID() string {
	x.mu.Lock()
	if x.next == x.n {
		x.refill()
	}
	start := uint32(0)
	if x.next > 0 {
		start = x.ends[x.next-1]
	}
	id := x.block[start:x.ends[x.next]]
	x.next++
	x.mu.Unlock()
	return id
}

// refill formats the next block. Called with mu held.
func (x *eventIDs) refill() {
	n := min(max(idBlockBytes/(len(x.prefix)+20), 1), idBlockMax)
	b := x.buf[:0]
	for i := range n {
		x.seq++
		b = strconv.AppendUint(append(b, x.prefix...), x.seq, 10)
		x.ends[i] = uint32(len(b))
	}
	x.buf = b
	x.block, x.n, x.next = string(b), n, 0
}
