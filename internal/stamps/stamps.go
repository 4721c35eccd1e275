// Package stamps is the Watchdog's coarse evidence clock: a stamp that
// recording evidence copies instead of reading a clock, and, optionally, the
// history by which the rules date evidence so that it never looks older
// than it is.
package stamps

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Never is the stamp of a channel without evidence: it is dated as itself.
const Never = int64(-1 << 63)

// Clock is the evidence clock. Now is read by Touch on the hot path; Refresh
// and Dated may run on any goroutine. The zero value keeps no history.
type Clock struct {
	now atomic.Int64 // Unix ns on the Watchdog's timeline; only moves forward

	// With a history (see KeepHistory): for each stamp of the last retain
	// nanoseconds, a reading taken after the stamp was replaced. mu also
	// serializes Refresh, so that a stamp is in the history before any
	// reader can see it replaced, and the history stays in stamp order.
	hist   bool
	mu     sync.Mutex
	spans  []span // by stamp, ascending
	retain atomic.Int64
	res    int64 // stamps closer than this share a span
}

// span: evidence stamped from first to last was recorded by bound.
type span struct{ first, last, bound int64 }

// KeepHistory makes c remember its stamps for at least retain, sharing a
// span between stamps closer than res. Call it before c is shared.
func (c *Clock) KeepHistory(retain, res time.Duration) {
	c.hist, c.res = true, int64(res)
	c.retain.Store(int64(retain))
}

// Retain widens the history to cover at least d (a no-op without one).
func (c *Clock) Retain(d time.Duration) {
	for cur := c.retain.Load(); int64(d) > cur && !c.retain.CompareAndSwap(cur, int64(d)); cur = c.retain.Load() {
	}
}

// Now is the current stamp.
func (c *Clock) Now() int64 { return c.now.Load() }

// Set sets the stamp, before c is shared.
func (c *Clock) Set(t int64) { c.now.Store(t) }

// Refresh moves the stamp to t if t is later. With a history, read is
// called after the move (it must be the real clock, never user code: it
// runs under c's lock) and the stamp replaced is remembered with its
// reading: every evidence that copied that stamp was recorded before it.
func (c *Clock) Refresh(t int64, read func() int64) {
	if !c.hist {
		for {
			cur := c.now.Load()
			if t <= cur || c.now.CompareAndSwap(cur, t) {
				return
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.now.Load()
	if t <= cur {
		return
	}
	c.now.Store(t)
	c.replaced(cur, read())
}

func (c *Clock) replaced(stamp, bound int64) {
	if n := len(c.spans); n > 0 && stamp-c.spans[n-1].first < c.res {
		c.spans[n-1].last, c.spans[n-1].bound = stamp, max(bound, c.spans[n-1].bound)
	} else {
		c.spans = append(c.spans, span{stamp, stamp, bound})
	}
	keep := bound - c.retain.Load()
	i := 0
	for i < len(c.spans)-1 && c.spans[i].bound < keep {
		i++
	}
	if i > 0 {
		c.spans = append(c.spans[:0], c.spans[i:]...)
	}
}

// Dated is the instant at which the rules date evidence carrying stamp s.
// Without a history: s. With one: the current stamp for evidence carrying
// it (every decision refreshes the stamp first, so that is the decision's
// instant), else the reading by which s had been replaced: never earlier
// than the evidence, at most one refresh gap later. A stamp older than the
// history's horizon is dated as itself.
func (c *Clock) Dated(s int64) int64 {
	if !c.hist || s == Never {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.now.Load(); s >= cur {
		return cur
	}
	i := sort.Search(len(c.spans), func(i int) bool { return c.spans[i].last >= s })
	if i == len(c.spans) || s < c.spans[0].first {
		return s
	}
	return max(c.spans[i].bound, s)
}
