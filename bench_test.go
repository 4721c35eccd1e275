package watchdog_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Recording evidence is the hot path: it runs on every line an agent prints.
// Compare with the naive mutex + time.Now "touch" in the same run:
//
//	go test -run '^$' -bench 'Touch' -benchmem -cpu 1,2 .
func benchSession(b *testing.B) *watchdog.Session {
	w := watchdog.New()
	b.Cleanup(func() { _ = w.Close(context.Background()) })
	s, err := w.Start(context.Background(), "bench", time.Now(), watchdog.Policy{IdleWindow: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkTouch(b *testing.B) {
	s := benchSession(b)
	b.ReportAllocs()
	for b.Loop() {
		s.Touch(watchdog.ChannelStdout)
	}
}

func BenchmarkTouchParallelOneSession(b *testing.B) {
	s := benchSession(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Touch(watchdog.ChannelStdout)
		}
	})
}

// naiveEvidence is what users write by hand: a mutex and time.Now per touch.
type naiveEvidence struct {
	mu    sync.Mutex
	last  time.Time
	count uint64
}

func (n *naiveEvidence) touch() {
	n.mu.Lock()
	n.last = time.Now()
	n.count++
	n.mu.Unlock()
}

func BenchmarkNaiveMutexTouch(b *testing.B) {
	var n naiveEvidence
	b.ReportAllocs()
	for b.Loop() {
		n.touch()
	}
}

func BenchmarkNaiveMutexTouchParallelOneSession(b *testing.B) {
	var n naiveEvidence
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.touch()
		}
	})
}
