package watchdog

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// passClock is a Clock that a benchmark moves by hand and whose timers never
// fire, so that the benchmark runs every scheduler pass itself.
type passClock struct{ now atomic.Int64 }

func (c *passClock) Now() time.Time { return time.Unix(0, c.now.Load()) }

func (c *passClock) AfterFunc(_ time.Duration, f func()) *clock.Timer {
	t := clock.New().AfterFunc(time.Hour, f)
	t.Stop()
	return t
}

type nopStore struct{}

func (nopStore) Append(context.Context, ...Event) error        { return nil }
func (nopStore) Load(context.Context, string) ([]Event, error) { return nil, nil }

// BenchmarkSchedulerPass measures the scheduler's own work per fire: passes
// of 64 sessions whose wall-clock budgets run out 1 ns apart, among at least
// 100,000 watched sessions started in shuffled order (so that neither the
// sessions nor the heap are in cache order), with a store that keeps
// nothing. This is the work that delays the next pass when fires pile up
// (see BENCHMARKS.md, fire lateness). ns/op and allocs/op are per fire; the
// recorder goroutine, which stores the events, catches up between passes
// and is not timed.
//
//	go test -run '^$' -bench SchedulerPass -benchmem .
func BenchmarkSchedulerPass(b *testing.B) {
	c := &passClock{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now.Store(t0.UnixNano())
	w := New(WithClock(c), WithStore(nopStore{}))
	defer func() { _ = w.Close(context.Background()) }()
	n := max(b.N, 100_000)
	pol := Policy{WallClock: time.Second}
	for i := range n {
		j := int((uint64(i) * 2654435761) % uint64(n)) // a permutation: n is not a multiple of that prime
		if _, err := w.Start(context.Background(), "s-"+strconv.Itoa(j), t0.Add(time.Duration(j)), pol); err != nil {
			b.Fatal(err)
		}
	}
	c.now.Store(t0.Add(time.Second).UnixNano())
	b.ReportAllocs()
	b.ResetTimer()
	for fired := 0; fired < b.N; fired += 64 {
		c.now.Add(64)
		w.pass()
		// The recorder's work is not the scheduler's: let it catch up,
		// untimed, as it does between passes on a real clock.
		b.StopTimer()
		if err := w.rec.Barrier(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
