package file_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// benchAppend measures Append throughput: batch events per call, reported as
// events/s. Every event is a new non-terminal event of one of 16 sessions.
// (The root package's BenchmarkMemoryStoreAppend uses the same loop.)
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
			evs[i] = fileEvent(fmt.Sprintf("b%d", n), fmt.Sprintf("s%d", n%16), watchdog.KindResume, 1)
		}
		if err := s.Append(ctx, evs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// go test -run '^$' -bench 'Append' -benchmem ./stores/file
func BenchmarkFileStoreAppend(b *testing.B) {
	for _, p := range []file.SyncPolicy{file.SyncEveryAppend, file.SyncOnClose} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("sync=%s/batch=%d", p, batch), func(b *testing.B) {
				s, err := file.Open(filepath.Join(b.TempDir(), "events.jsonl"), file.WithSync(p))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchAppend(b, s, batch)
			})
		}
	}
}

// BenchmarkRecorderThroughput is the rate at which a Watchdog's recorder
// writes to a file store that fsyncs every append: each iteration starts and
// stops one session (two records); the time includes draining the queue.
// "batched" is the Store itself (AppendEach: one write and one fsync per
// batch); "per-event" hides AppendEach (one fsync per event).
//
//	go test -run '^$' -bench RecorderThroughput -benchtime 20000x ./stores/file
func BenchmarkRecorderThroughput(b *testing.B) {
	for _, mode := range []string{"per-event", "batched"} {
		b.Run(mode, func(b *testing.B) {
			s, err := file.Open(filepath.Join(b.TempDir(), "events.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var store watchdog.EventStore = s
			if mode == "per-event" {
				store = struct{ watchdog.EventStore }{s}
			}
			ctx := context.Background()
			w := watchdog.New(watchdog.WithStore(store))
			defer w.Close(ctx)
			start := time.Now()
			for i := range b.N {
				sess, err := w.Start(ctx, fmt.Sprintf("s%d", i), time.Now(), watchdog.Policy{})
				if err != nil {
					b.Fatal(err)
				}
				if err := sess.Stop(); err != nil {
					b.Fatal(err)
				}
			}
			for w.Stats().Queued > 0 {
				if err := w.Check(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
