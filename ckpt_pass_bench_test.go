package watchdog

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCheckpointPass is what one checkpoint pass (the heartbeat's, every
// third of the lease; WithCheckpoints' every d) costs the owner over 10,000
// running windows, each with fresh evidence since the last pass ("changed")
// or none ("steady"): per pass, and per window (ns/window).
//
//	go test -run '^$' -bench CheckpointPass -count 5 .
func BenchmarkCheckpointPass(b *testing.B) {
	const n = 10_000
	w := New()
	defer w.Close(context.Background())
	ss := make([]*Session, n)
	for i := range ss {
		s, err := w.Start(context.Background(), fmt.Sprintf("s%d", i), time.Now(), Policy{WallClock: time.Hour, IdleWindow: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = s
	}
	for _, changed := range []bool{false, true} {
		b.Run(map[bool]string{false: "steady", true: "changed"}[changed], func(b *testing.B) {
			for b.Loop() {
				if changed {
					b.StopTimer()
					for _, s := range ss {
						s.Touch(ChannelStdout)
					}
					b.StartTimer()
				}
				checkpointPass(w)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/window")
		})
	}
}
