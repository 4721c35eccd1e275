package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// ../../scripts/with-postgres go test -run '^$' -bench . -benchmem ./...
func BenchmarkAppend(b *testing.B) {
	pool := testPool(b)
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := newStore(b, pool, WithTable(uniqueTable(b)))
			ctx := context.Background()
			evs := make([]watchdog.Event, batch)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range evs {
					n++
					evs[i] = ev(fmt.Sprintf("b%d", n), fmt.Sprintf("s%d", n%16), watchdog.KindResume, 1)
				}
				if err := s.Append(ctx, evs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRecorderThroughput is the rate at which a Watchdog's recorder
// writes to PostgreSQL: each iteration starts and stops one session (two
// records) on one of 100 goroutines (Start waits for the database's answer,
// since the Store arbitrates openings); the time includes draining the
// queue. "batched" is the Store
// itself (AppendEach: one transaction per batch); "per-event" hides
// AppendEach, so the recorder appends one event per transaction. Run it on
// a server that pays for durability (fsync and synchronous_commit on):
//
//	WATCHDOG_PG_DURABLE=1 ../../scripts/with-postgres go test -run '^$' -bench RecorderThroughput -benchtime 20000x
func BenchmarkRecorderThroughput(b *testing.B) {
	const starters = 100
	pool := testPool(b)
	for _, mode := range []string{"per-event", "batched"} {
		b.Run(mode, func(b *testing.B) {
			var store watchdog.EventStore = newStore(b, pool, WithTable(uniqueTable(b)))
			if mode == "per-event" {
				store = struct{ watchdog.EventStore }{store}
			}
			ctx := context.Background()
			w := watchdog.New(watchdog.WithStore(store))
			defer w.Close(ctx)
			start := time.Now()
			var wg sync.WaitGroup
			for g := range starters {
				wg.Go(func() {
					for i := g; i < b.N; i += starters {
						sess, err := w.Start(ctx, fmt.Sprintf("s%d", i), time.Now(), watchdog.Policy{})
						if err != nil {
							b.Error(err)
							return
						}
						if err := sess.Stop(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for w.Stats().Queued > 0 {
				if err := w.Check(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
