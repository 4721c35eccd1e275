package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// benchAppend measures Append throughput: batch events per call, reported as
// events/s. Every event is a new non-terminal event of one of 16 sessions.
// (stores/file's BenchmarkFileStoreAppend uses the same loop.)
func benchAppend(b *testing.B, s watchdog.EventStore, batch int) {
	b.Helper()
	ctx := context.Background()
	evs := make([]watchdog.Event, batch)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range evs {
			n++
			evs[i] = watchdog.Event{
				ID: fmt.Sprintf("b%d", n), AggregateID: fmt.Sprintf("s%d", n%16),
				Kind: watchdog.KindResume, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0,
				OccurredAt: t0.Add(time.Second), ElapsedSeconds: 1, ConfiguredBudgetSeconds: 10,
			}
		}
		if err := s.Append(ctx, evs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// go test -run '^$' -bench 'Append' -benchmem . ./stores/file
func BenchmarkMemoryStoreAppend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchAppend(b, watchdog.NewMemoryStore(), batch)
		})
	}
}
