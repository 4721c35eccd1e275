package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Benchmarks of performance at scale, each beside the naive approach a user
// would otherwise write, in the same run. See BENCHMARKS.md for the
// commands, the machine and the figures:
//
//	go test -run '^$' -bench 'MemPerSession' -benchtime 1x -count 10 .
//	go test -run '^$' -bench 'StartStop' -benchmem -count 10 .
//	go test -run '^$' -bench 'VerdictThroughput' -benchtime 1x -count 5 .

// discardStore is an EventStore that keeps nothing: it isolates the
// Watchdog's own cost from the store's.
type discardStore struct{}

func (discardStore) Append(context.Context, ...watchdog.Event) error { return nil }
func (discardStore) Load(context.Context, string) ([]watchdog.Event, error) {
	return nil, nil
}

// slowStore is a MemoryStore whose every Append takes delay.
type slowStore struct {
	*watchdog.MemoryStore
	delay time.Duration
}

func (s slowStore) Append(ctx context.Context, events ...watchdog.Event) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.MemoryStore.Append(ctx, events...)
}

// sessionIDs returns n distinct session ids, built before the measurement.
func sessionIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "session-" + strconv.Itoa(i)
	}
	return ids
}

// liveBytes returns the live heap plus the goroutine stacks in use, after
// two full collections. Stacks count: they are most of what a goroutine per
// session costs, and runtime.MemStats.HeapAlloc does not include them.
func liveBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

var sessionCounts = []int{10_000, 100_000, 1_000_000}

// benchMem reports the live heap per watched session (B/session): the heap
// after watching n sessions minus the heap before, over n. watch starts n
// sessions and returns a function that ends them.
func benchMem(b *testing.B, n int, watch func(ids []string) (stop func())) {
	ids := sessionIDs(n)
	var per float64
	for b.Loop() {
		before := liveBytes()
		stop := watch(ids)
		after := liveBytes()
		per = float64(int64(after)-int64(before)) / float64(n)
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric(per, "B/session")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMemPerSession measures the memory of one watched session, its
// context included (live heap plus goroutine stacks), for the Watchdog and the two naive approaches.
func BenchmarkMemPerSession(b *testing.B) {
	pol := watchdog.Policy{WallClock: time.Hour}
	for _, n := range sessionCounts {
		b.Run(fmt.Sprintf("impl=watchdog-discard/n=%d", n), func(b *testing.B) {
			benchMem(b, n, func(ids []string) func() {
				return watchN(b, ids, pol, watchdog.WithStore(discardStore{}))
			})
		})
		b.Run(fmt.Sprintf("impl=watchdog-memstore/n=%d", n), func(b *testing.B) {
			benchMem(b, n, func(ids []string) func() {
				return watchN(b, ids, pol)
			})
		})
		b.Run(fmt.Sprintf("impl=goroutine-ticker/n=%d", n), func(b *testing.B) {
			benchMem(b, n, func(ids []string) func() { return tickerN(len(ids), time.Hour) })
		})
		b.Run(fmt.Sprintf("impl=afterfunc/n=%d", n), func(b *testing.B) {
			benchMem(b, n, func(ids []string) func() { return afterFuncN(len(ids), time.Hour) })
		})
	}
}

// watchN starts a Watchdog watching every id; the returned function closes it.
func watchN(b *testing.B, ids []string, pol watchdog.Policy, opts ...watchdog.Option) func() {
	w := watchdog.New(opts...)
	ctx := context.Background()
	now := time.Now()
	for _, id := range ids {
		if _, err := w.Start(ctx, id, now, pol); err != nil {
			b.Fatal(err)
		}
	}
	// Let the recorder catch up so that its queue is not counted.
	if err := w.Check(ctx); err != nil {
		b.Fatal(err)
	}
	return func() { _ = w.Close(context.Background()) }
}

// tickerN is the naive watchdog: one goroutine and one time.Ticker per
// session, checking the session's deadline every tick.
func tickerN(n int, budget time.Duration) func() {
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, n)
	started := make(chan struct{}, 1024)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		deadline := time.Now().Add(budget)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			started <- struct{}{}
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					if now.After(deadline) {
						cancel()
						return
					}
				}
			}
		}()
		<-started
	}
	return func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}
}

// afterFuncN is the other naive watchdog: one time.AfterFunc per session
// cancelling its context at the deadline.
func afterFuncN(n int, budget time.Duration) func() {
	type sess struct {
		ctx    context.Context
		cancel context.CancelFunc
		timer  *time.Timer
	}
	ss := make([]sess, n)
	for i := range ss {
		ctx, cancel := context.WithCancel(context.Background())
		ss[i] = sess{ctx, cancel, time.AfterFunc(budget, cancel)}
	}
	return func() {
		for _, s := range ss {
			s.timer.Stop()
			s.cancel()
		}
	}
}

// BenchmarkStartStop measures Start followed by Stop of one session, with a
// store that keeps nothing and with the default MemoryStore (whose maps keep
// growing with every session: that is part of its cost), beside the naive
// per-session timer and goroutine.
func BenchmarkStartStop(b *testing.B) {
	pol := watchdog.Policy{WallClock: time.Hour}
	ctx := context.Background()
	run := func(b *testing.B, opts ...watchdog.Option) {
		w := watchdog.New(opts...)
		defer func() { _ = w.Close(context.Background()) }()
		ids := sessionIDs(1 << 16)
		gen := 0
		now := time.Now()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i == len(ids) { // fresh ids: a store refuses a second stop of a window
				b.StopTimer()
				gen++
				for j := range ids {
					ids[j] = "session-" + strconv.Itoa(gen) + "-" + strconv.Itoa(j)
				}
				i = 0
				b.StartTimer()
			}
			s, err := w.Start(ctx, ids[i], now, pol)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Stop(); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.StopTimer()
		if err := w.Check(ctx); err != nil { // the recorder's backlog is not timed
			b.Fatal(err)
		}
	}
	b.Run("impl=watchdog-discard", func(b *testing.B) { run(b, watchdog.WithStore(discardStore{})) })
	b.Run("impl=watchdog-memstore", func(b *testing.B) { run(b) })
	b.Run("impl=afterfunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, cancel := context.WithCancel(ctx)
			t := time.AfterFunc(time.Hour, cancel)
			t.Stop()
			cancel()
			_ = c
		}
	})
	b.Run("impl=goroutine-ticker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-c.Done():
						return
					case <-t.C:
					}
				}
			}()
			cancel()
			<-done
		}
	})
}

// BenchmarkStartParallel starts sessions from GOMAXPROCS*8 goroutines at once
// (and stops them), to expose lock convoys; profile it with -mutexprofile.
func BenchmarkStartParallel(b *testing.B) {
	pol := watchdog.Policy{WallClock: time.Hour}
	ctx := context.Background()
	w := watchdog.New(watchdog.WithStore(discardStore{}))
	defer func() { _ = w.Close(context.Background()) }()
	var seq atomic.Uint64
	now := time.Now()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		for pb.Next() {
			buf = strconv.AppendUint(append(buf[:0], "p-"...), seq.Add(1), 10)
			s, err := w.Start(ctx, string(buf), now, pol)
			if err != nil {
				b.Error(err)
				return
			}
			_ = s.Stop()
		}
	})
}

// BenchmarkConcurrentStarts100k starts 100,000 sessions from 1,000
// goroutines at once and reports the wall time of the whole burst.
func BenchmarkConcurrentStarts100k(b *testing.B) {
	const n, workers = 100_000, 1000
	pol := watchdog.Policy{WallClock: time.Hour}
	ctx := context.Background()
	ids := sessionIDs(n)
	for b.Loop() {
		b.StopTimer()
		w := watchdog.New(watchdog.WithStore(discardStore{}))
		var wg sync.WaitGroup
		start := make(chan struct{})
		now := time.Now()
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := g; i < n; i += workers {
					if _, err := w.Start(ctx, ids[i], now, pol); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		b.StartTimer()
		close(start)
		wg.Wait()
		b.StopTimer()
		_ = w.Close(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/start")
}

// BenchmarkVerdictThroughput starts 100,000 sessions whose windows all end
// at the same instant, then reports how long after that instant every
// context was cancelled (cancel-ms) and every verdict recorded (record-ms).
// With a store that takes 1 ms per Append the records fall behind (100,000
// sessions make 300,000 events, five minutes of appends) but the cancels
// must not: that variant reports cancel-ms only.
func BenchmarkVerdictThroughput(b *testing.B) {
	const n = 100_000
	ids := sessionIDs(n)
	run := func(b *testing.B, store func() watchdog.EventStore, waitRecords bool) {
		var cancelMs, recordMs, firedMs float64
		for b.Loop() {
			b.StopTimer()
			var recorded atomic.Int64
			allRecorded := make(chan time.Time, 1)
			w := watchdog.New(watchdog.WithStore(store()), watchdog.WithObserver(watchdog.Observer{
				OnEvent: func(e watchdog.Event) {
					if e.Kind == watchdog.KindCancel && recorded.Add(1) == n {
						allRecorded <- time.Now()
					}
				},
			}))
			ctx := context.Background()
			budget := time.Minute
			due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
			pol := watchdog.Policy{WallClock: budget}
			sessions := make([]*watchdog.Session, n)
			for i, id := range ids {
				s, err := w.Start(ctx, id, due.Add(-budget), pol)
				if err != nil {
					b.Fatal(err)
				}
				sessions[i] = s
			}
			if time.Now().After(due) {
				b.Fatalf("starting %d sessions took more than 3 s", n)
			}
			time.Sleep(time.Until(due))
			b.StartTimer()
			for _, s := range sessions {
				<-s.Context().Done()
			}
			last := time.Now()
			cancelMs = float64(last.Sub(due)) / 1e6
			if waitRecords {
				select {
				case at := <-allRecorded:
					recordMs = float64(at.Sub(due)) / 1e6
				case <-time.After(time.Minute):
					b.Fatal("verdicts not recorded within a minute")
				}
			}
			b.StopTimer()
			for _, s := range sessions {
				var v *watchdog.VerdictError
				if !errors.As(context.Cause(s.Context()), &v) {
					b.Fatalf("session %s: cause %v", s.ID(), context.Cause(s.Context()))
				}
				if late := float64(v.FiredAt.Sub(due)) / 1e6; late > firedMs {
					firedMs = late
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			_ = w.Close(cctx)
			cancel()
			b.StartTimer()
		}
		b.ReportMetric(cancelMs, "cancel-ms")
		b.ReportMetric(firedMs, "max-fired-ms")
		if waitRecords {
			b.ReportMetric(recordMs, "record-ms")
		}
		b.ReportMetric(0, "ns/op")
	}
	b.Run("store=memory", func(b *testing.B) {
		run(b, func() watchdog.EventStore { return watchdog.NewMemoryStore() }, true)
	})
	b.Run("store=slow-1ms", func(b *testing.B) {
		run(b, func() watchdog.EventStore {
			return slowStore{watchdog.NewMemoryStore(), time.Millisecond}
		}, false)
	})
}
