package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// BenchmarkSoakRecorderLag runs 5,000 sessions on one Watchdog writing to
// PostgreSQL for 15 s (WATCHDOG_SOAK_SECONDS to change it) and reports the
// recorder's lag: Stats.OldestQueued, sampled every 50 ms (p50, p99, max),
// and the events recorded per second. Half the sessions go idle (an idle
// window of 1 s, three settle checks 500 ms apart) and half report work on
// stdout every 300 ms under a wall-clock budget of 3 to 8 s; each session
// is resumed as soon as its window ends. "per-event" hides AppendEach (one
// transaction per event); "batched" is the Store itself. Run it on a
// server that pays for durability:
//
//	WATCHDOG_PG_DURABLE=1 ../../scripts/with-postgres go test -run '^$' -bench SoakRecorderLag -benchtime 1x -timeout 10m
func BenchmarkSoakRecorderLag(b *testing.B) {
	pool := testPool(b)
	const sessions = 5000
	d := 15 * time.Second
	if v, err := strconv.Atoi(os.Getenv("WATCHDOG_SOAK_SECONDS")); err == nil && v > 0 {
		d = time.Duration(v) * time.Second
	}
	for _, mode := range []string{"per-event", "batched"} {
		b.Run(mode, func(b *testing.B) {
			var store watchdog.EventStore = newStore(b, pool, WithTable(uniqueTable(b)))
			if mode == "per-event" {
				store = struct{ watchdog.EventStore }{store}
			}
			var recorded atomic.Int64
			w := watchdog.New(watchdog.WithStore(store),
				watchdog.WithObserver(watchdog.Observer{OnEvent: func(watchdog.Event) { recorded.Add(1) }}))
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var wg sync.WaitGroup
			for i := range sessions {
				p := watchdog.Policy{WallClock: time.Duration(3000+i%5000) * time.Millisecond}
				busy := i%2 == 0
				if !busy {
					p = watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, SettleChecks: 3, SettleInterval: 500 * time.Millisecond}
				}
				id := fmt.Sprintf("soak-%d", i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := w.Start(ctx, id, time.Now(), p)
					for err == nil {
						runWindow(ctx, s, busy)
						if ctx.Err() != nil {
							_ = s.Stop()
							return
						}
						s, err = w.Resume(ctx, id, p)
					}
					if ctx.Err() == nil {
						b.Errorf("session %s: %v", id, err)
					}
				}()
			}
			var lags []time.Duration
			tick := time.NewTicker(50 * time.Millisecond)
			start := time.Now()
			for ctx.Err() == nil {
				select {
				case <-tick.C:
					lags = append(lags, w.Stats().OldestQueued)
				case <-ctx.Done():
				}
			}
			tick.Stop()
			n := recorded.Load()
			elapsed := time.Since(start)
			wg.Wait()
			_ = w.Close(context.Background())
			slices.Sort(lags)
			at := func(q float64) float64 { return float64(lags[int(q*float64(len(lags)-1))]) / float64(time.Millisecond) }
			b.ReportMetric(at(0.5), "lag-p50-ms")
			b.ReportMetric(at(0.99), "lag-p99-ms")
			b.ReportMetric(at(1), "lag-max-ms")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		})
	}
}

// runWindow keeps s busy (a stdout touch every 300 ms) or idle until its
// window ends or ctx does.
func runWindow(ctx context.Context, s *watchdog.Session, busy bool) {
	if !busy {
		select {
		case <-s.Context().Done():
		case <-ctx.Done():
		}
		return
	}
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.Context().Done():
			return
		case <-ctx.Done():
			return
		case <-t.C:
			s.Touch(watchdog.ChannelStdout)
		}
	}
}
