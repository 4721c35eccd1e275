package watchdog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testutil"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// BenchmarkCall is the cost of one call under a deadline, in a session,
// against the bare function in the same run, and of one Progress report
// inside a call (per chunk or step):
//
//	go test -run '^$' -bench 'BenchmarkCall|BenchmarkProgress' -benchmem .
func BenchmarkCall(b *testing.B) {
	fn := func(context.Context) error { return nil }
	b.Run("bare", func(b *testing.B) {
		ctx := benchSession(b).Context()
		b.ReportAllocs()
		for range b.N {
			_ = fn(ctx)
		}
	})
	b.Run("Call", func(b *testing.B) {
		ctx := benchSession(b).Context()
		b.ReportAllocs()
		for range b.N {
			_ = watchdog.Call(ctx, "tool", time.Minute, fn)
		}
	})
	b.Run("Begin+Run", func(b *testing.B) {
		ctx := benchSession(b).Context()
		l := watchdog.CallLimits{Cap: time.Minute, Idle: 10 * time.Second}
		b.ReportAllocs()
		for range b.N {
			_ = callWith(ctx, "tool", l, fn)
		}
	})
}

func BenchmarkProgress(b *testing.B) {
	run := func(b *testing.B, ctx context.Context) {
		_ = callWith(ctx, "tool", watchdog.CallLimits{Cap: time.Hour, Idle: time.Minute}, func(ctx context.Context) error {
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				watchdog.Progress(ctx, uint64(i+1))
			}
			return nil
		})
	}
	b.Run("session", func(b *testing.B) { run(b, benchSession(b).Context()) })
	b.Run("no-session", func(b *testing.B) { run(b, context.Background()) })
}

// BenchmarkHandle is a call's begin and end as a handle, in a session whose
// idle rule is on and call records off, against context.WithTimeout and
// its cancel in the same run (the floor: a context with a deadline), and
// Call (Begin, then Run's goroutine):
//
//	go test -run '^$' -bench 'BenchmarkHandle' -benchmem -count 6 .
func BenchmarkHandle(b *testing.B) {
	b.Run("WithTimeout+cancel", func(b *testing.B) {
		ctx := benchSession(b).Context()
		b.ReportAllocs()
		for b.Loop() {
			_, cancel := context.WithTimeout(ctx, time.Minute)
			cancel()
		}
	})
	b.Run("Begin+End", func(b *testing.B) {
		ctx := benchSession(b).Context()
		l := watchdog.CallLimits{Cap: time.Minute}
		b.ReportAllocs()
		for b.Loop() {
			h, _ := watchdog.Begin(ctx, "tool", l)
			_ = h.End(nil)
		}
	})
	b.Run("Call", func(b *testing.B) {
		ctx := benchSession(b).Context()
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			_ = watchdog.Call(ctx, "tool", time.Minute, fn)
		}
	})
}

// BenchmarkCallsInFlight begins n calls in one session, then ends them all,
// oldest first, beside n contexts with a deadline (context.WithTimeout on
// the session's context, then their cancels) in the same run: ns/call is
// per call (a begin and an end), bytes/call-in-flight the heap each call
// in flight holds, goroutines the most seen while they were in flight.
// The end of each is O(1) in the session's books and the Watchdog's; what
// grows with n is what the contexts' own cancel costs too (the parent's map
// of children, the cache).
//
//	go test -run '^$' -bench 'BenchmarkCallsInFlight' -benchtime 5x -count 3 .
func BenchmarkCallsInFlight(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint("WithTimeout/", n), func(b *testing.B) {
			ctx := benchSession(b).Context()
			cancels := make([]context.CancelFunc, n)
			for b.Loop() {
				for i := range cancels {
					_, cancels[i] = context.WithTimeout(ctx, time.Hour)
				}
				for _, c := range cancels {
					c()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
		})
		b.Run(fmt.Sprint("Begin/", n), func(b *testing.B) {
			ctx := benchSession(b).Context()
			l := watchdog.CallLimits{Cap: time.Hour}
			hs := make([]*watchdog.CallHandle, n)
			var before, after runtime.MemStats
			goroutines := 0
			for b.Loop() {
				b.StopTimer()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				for i := range hs {
					hs[i], _ = watchdog.Begin(ctx, "tool", l)
				}
				b.StopTimer()
				runtime.ReadMemStats(&after)
				goroutines = max(goroutines, runtime.NumGoroutine())
				b.StartTimer()
				for _, h := range hs {
					_ = h.End(nil)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "bytes/call-in-flight")
			b.ReportMetric(float64(goroutines), "goroutines")
		})
	}
}

// BenchmarkVerdictWithCallsInFlight records the largest verdict of a
// session with 100,000 calls in flight (the list is capped at 100): its
// JSON size in bytes.
//
//	go test -run '^$' -bench 'BenchmarkVerdictWithCallsInFlight' -benchtime 1x .
func BenchmarkVerdictWithCallsInFlight(b *testing.B) {
	for b.Loop() {
		store := watchdog.NewMemoryStore()
		mock := testutil.NewMock()
		w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "big", mock.Now(), watchdog.Policy{WallClock: time.Minute, IdleWindow: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		for range 100_000 {
			if _, err := watchdog.Begin(s.Context(), "tool", watchdog.CallLimits{Cap: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		if err := watchdogtest.Advance(context.Background(), mock, 2*time.Minute, w); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		evs, err := store.Load(context.Background(), "big")
		if err != nil {
			b.Fatal(err)
		}
		largest := 0
		for _, e := range evs {
			j, _ := json.Marshal(e)
			largest = max(largest, len(j))
		}
		b.ReportMetric(float64(largest), "bytes/largest-verdict")
	}
}
