package postgres

import (
	"context"
	"fmt"
	"testing"

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
