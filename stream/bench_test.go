package stream_test

import (
	"context"
	"io"
	"iter"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
)

// countStream is an in-memory stream of n chunks: what is left is the cost
// of the loop itself.
type countStream struct {
	n, i int
	cur  chunk
}

func (c *countStream) Next() bool {
	if c.i == c.n {
		return false
	}
	c.i++
	c.cur = chunk{"tok"}
	return true
}
func (c *countStream) Current() chunk { return c.cur }
func (c *countStream) Err() error     { return nil }
func (c *countStream) Close() error   { return nil }

var (
	sink   string
	limits = watchdog.CallLimits{Idle: time.Minute, Cap: time.Hour}
)

// contexts are the guarded benchmarks' contexts: none (the guard runs on
// real timers) and a watched session's.
var contexts = []struct {
	name string
	ctx  func(*testing.B) context.Context
}{
	{"guarded", func(*testing.B) context.Context { return context.Background() }},
	{"guarded-session", sessionCtx},
}

// sessionCtx returns a watched session's context for the benchmark.
func sessionCtx(b *testing.B) context.Context {
	w := watchdog.New()
	b.Cleanup(func() { _ = w.Close(context.Background()) })
	s, err := w.Start(context.Background(), "bench", time.Now(), watchdog.Policy{})
	if err != nil {
		b.Fatal(err)
	}
	return s.Context()
}

// BenchmarkNext is the cost per chunk of the Next shape: the bare stream,
// and the guarded one without and inside a session (ns/op is per chunk).
func BenchmarkNext(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		s := &countStream{n: b.N}
		for s.Next() {
			sink = s.Current().text
		}
	})
	for _, tc := range contexts {
		b.Run(tc.name, func(b *testing.B) {
			ctx := tc.ctx(b)
			b.ReportAllocs()
			b.ResetTimer()
			g := stream.Guard(ctx, "llm", opened(&countStream{n: b.N}), limits, isProgress)
			for g.Next() {
				sink = g.Current().text
			}
			b.StopTimer()
			_ = g.Close()
		})
	}
}

func countSeq(n int) func(context.Context) iter.Seq2[chunk, error] {
	return func(context.Context) iter.Seq2[chunk, error] {
		return func(yield func(chunk, error) bool) {
			for range n {
				if !yield(chunk{"tok"}, nil) {
					return
				}
			}
		}
	}
}

// BenchmarkSeq is the cost per value of the iter.Seq2 shape.
func BenchmarkSeq(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for c, _ := range countSeq(b.N)(context.Background()) {
			sink = c.text
		}
	})
	for _, tc := range contexts {
		b.Run(tc.name, func(b *testing.B) {
			ctx := tc.ctx(b)
			b.ReportAllocs()
			b.ResetTimer()
			for c, _ := range stream.Seq(ctx, "llm", countSeq(b.N), limits, isProgress) {
				sink = c.text
			}
		})
	}
}

// zeroReader reads forever in whatever size is asked.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { return len(p), nil }
func (zeroReader) Close() error               { return nil }

// sseReader reads one server-sent event per Read, as an HTTP body of a
// stream flushed event by event does: a data line and a blank line.
type sseReader struct{}

var sseEvent = []byte("data: {\"delta\":\"tok\"}\n\n")

func (sseReader) Read(p []byte) (int, error) { return copy(p, sseEvent), nil }
func (sseReader) Close() error               { return nil }

// BenchmarkReader is the cost per Read of the io.ReadCloser shape: of 512
// bytes, every byte progress (progress nil); and of one server-sent event
// per Read, with a progress function on its lines (the lines form).
func BenchmarkReader(b *testing.B) {
	buf := make([]byte, 512)
	for _, form := range []struct {
		name     string
		body     io.ReadCloser
		progress func([]byte) bool
	}{
		{"bytes", zeroReader{}, nil},
		{"lines", sseReader{}, sseProgress},
	} {
		b.Run(form.name+"/bare", func(b *testing.B) {
			b.ReportAllocs()
			r := form.body
			for range b.N {
				_, _ = r.Read(buf)
			}
		})
		for _, tc := range contexts {
			b.Run(form.name+"/"+tc.name, func(b *testing.B) {
				ctx := tc.ctx(b)
				b.ReportAllocs()
				b.ResetTimer()
				r, err := stream.Reader(ctx, "body", openedBody(form.body), limits, form.progress)
				if err != nil {
					b.Fatal(err)
				}
				for range b.N {
					_, _ = r.Read(buf)
				}
				b.StopTimer()
				_ = r.Close()
			})
		}
	}
}
