package stamps

import (
	"sync"
	"testing"
	"time"
)

// Evidence is dated at the current stamp if it carries it, else at the
// reading by which its stamp had been replaced, never earlier than the
// stamp itself; beyond the horizon, at its stamp.
func TestDatedIsNeverEarlierThanTheStamp(t *testing.T) {
	var c Clock
	c.KeepHistory(10*time.Second, 50*time.Millisecond)
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	c.Set(ms(0))
	c.Refresh(ms(100), func() int64 { return ms(100) })   // 0 replaced by 100
	c.Refresh(ms(3000), func() int64 { return ms(3500) }) // 100 replaced late: by 3.5 s
	c.Refresh(ms(3020), func() int64 { return ms(3030) }) // 3000 replaced by 3.03 s
	c.Refresh(ms(2000), func() int64 { panic("not later: no reading") })
	for _, tc := range []struct{ stamp, want int64 }{
		{Never, Never},
		{ms(3020), ms(3020)}, // the current stamp
		{ms(0), ms(100)},
		{ms(100), ms(3500)}, // carried through a starved refresh: dated when it ended
		{ms(3000), ms(3030)},
	} {
		if got := c.Dated(tc.stamp); got != tc.want {
			t.Errorf("Dated(%d) = %d, want %d", tc.stamp, got, tc.want)
		}
	}
	c.Refresh(ms(60_000), func() int64 { return ms(60_000) }) // the old spans leave the horizon
	if got := c.Dated(ms(0)); got != ms(0) {
		t.Errorf("beyond the horizon: Dated(0) = %d, want the stamp itself", got)
	}
}

// Refreshes and readers race freely: a reader never sees a stamp replaced
// before it is in the history (it would date the evidence at the old stamp,
// too early), and the history stays in stamp order. Run with -race.
func TestConcurrentRefreshesKeepTheHistoryUsable(t *testing.T) {
	var c Clock
	c.KeepHistory(time.Hour, 0)
	var mu sync.Mutex
	now := int64(0)
	read := func() int64 { mu.Lock(); defer mu.Unlock(); now++; return now }
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				c.Refresh(read(), read)
				s := c.Now()
				if d := c.Dated(s); d < s {
					t.Errorf("Dated(%d) = %d, earlier than the stamp", s, d)
				}
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 1; i < len(c.spans); i++ {
		if c.spans[i].first <= c.spans[i-1].last {
			t.Fatalf("history out of order at %d: %+v then %+v", i, c.spans[i-1], c.spans[i])
		}
	}
}
