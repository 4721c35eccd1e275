package record

import (
	"context"
	"fmt"
	"testing"

	"github.com/benbjohnson/clock"
)

// Resume reads a session's queued events with Pending while the scheduler
// pushes new ones: its cost must not grow with the backlog of other
// sessions. The backlog is of 3-event sessions; the session asked for has
// one queued event.
func BenchmarkPending(b *testing.B) {
	for _, n := range []int{0, 300_000, 900_000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			r := newTestRecorder(&orderStore{}, clock.NewMock())
			for i := range n {
				r.Push(one("e", fmt.Sprint("s", i/3)))
			}
			r.Push(one("t1", "target"))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if got := r.Pending("target"); len(got) != 1 {
					b.Fatalf("pending %v", got)
				}
			}
		})
	}
}

// The recorder's own cost per event, store aside: push and drain 64
// events of 16 lanes at a time into a store that takes them at once.
func BenchmarkPushAndDrain(b *testing.B) {
	r := New(Config[item, ev]{
		Append:   func(context.Context, []ev) error { return nil },
		Expand:   func(dst []ev, t *item) []ev { return append(dst, t.evs...) },
		Lane:     func(t *item) string { return t.evs[0].lane },
		Classify: func(error) Outcome { return Retry },
		Name:     func(e *ev) string { return e.id },
		Clock:    clock.NewMock(),
	})
	items := make([]item, 64)
	for i := range items {
		items[i] = one("e", fmt.Sprint("s", i%16))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(items) {
		r.Push(items...)
		r.drain()
	}
}
