// Package stream guards streams against stalls: a first-chunk limit, an
// idle limit between chunks and a cap nothing extends, for the three shapes
// streams come in:
//
//   - Guard, for the Next() bool / Current() / Err() / Close() iterators of
//     openai-go, anthropic-sdk-go and most Go SDKs that stream;
//   - Seq, for a producer func(ctx) iter.Seq2[T, error] that honours its
//     context;
//   - Reader, for an io.ReadCloser body (closing it is what unblocks a
//     stalled read).
//
// Each takes a function that opens the stream (or produces it) on the
// guard's context rather than a stream already open: SDKs block in their
// NewStreaming until the response's headers arrive, and a server or proxy
// that holds them back must be bounded too. So the wait for the stream to
// open counts toward the first-chunk limit and the cap, and a stall while
// opening cancels the context the open function was given (which is what
// unblocks an HTTP request in progress). That context stays the stream's
// until the guard ends: a request made on it reads its body under it.
//
// A chunk counts as progress only when the progress function says so, so
// keep-alive pings and empty deltas keep nothing alive. On a stall the guard
// unblocks the caller (it closes the stream, or cancels the producer's
// context) and reports an error matching ErrStalled and wrapping the
// *watchdog.VerdictError of the call, which the Watchdog records like any
// other deadline (runtime.handler.deadline_exceeded, rule handler_idle,
// with the last progress). Progress chunks count as evidence on the
// session (see watchdog.Progress).
//
// A guard is a call (watchdog.Begin) named name, under a
// watchdog.CallLimits (FirstProgress is the first chunk's limit), run on the session's
// Watchdog and clock when ctx belongs to a watched session (so tests drive it
// with the mock clock), on real timers otherwise. Per progress chunk it costs
// a watchdog.Progress call: no allocation, no timer reset, and no clock read
// inside a session (one monotonic clock read outside one). Reader with a
// progress function also looks for the line ends of each Read, and copies
// only a line that two Reads cut in two.
package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sessionwatchdog/watchdog"
)

// ErrStalled matches the error of a stream stopped because no progress chunk
// came within its first-chunk or idle limit. A stream stopped by its cap
// matches watchdog.ErrDeadlineExceeded but not ErrStalled.
var ErrStalled = errors.New("stream: stalled")

// guard is what the three shapes share: the call that holds the limits,
// a handle begun when the stream opens and ended when the consumer is done
// with it, and the progress count. Nothing of it runs while the stream
// flows: the call's end, if it comes first, runs unblock.
type guard struct {
	h       *watchdog.CallHandle
	ctx     context.Context // the call's, for Progress; nil if the call never started
	n       uint64          // progress chunks so far; the consumer's goroutine only
	stopped atomic.Bool     // the call ended first (a stall, the cap, ctx): the stream is being closed
	stop    func() bool     // stops the call's end from running unblock
	cut     chan struct{}   // closed when unblock has run
	err     error           // why the call ended the stream, nil if it did not; set by finish
	once    sync.Once       // runs finish's work once
}

// start begins the call for the stream (or refuses it). unblock is called,
// on a goroutine of the context package, if the call ends before the
// consumer is done.
func (g *guard) start(ctx context.Context, name string, l watchdog.CallLimits, unblock func()) {
	h, err := watchdog.Begin(ctx, name, l)
	if err != nil {
		g.refuse(err)
		return
	}
	g.h, g.ctx, g.cut = h, h.Context(), make(chan struct{})
	g.stop = context.AfterFunc(g.ctx, func() {
		defer close(g.cut)
		g.stopped.Store(true)
		if unblock != nil {
			unblock()
		}
	})
}

// refuse is start for bad input found before the call: the guard never
// runs (g.ctx stays nil) and finish returns err.
func (g *guard) refuse(err error) {
	g.err = err
	g.once.Do(func() {})
}

// chunk counts one progress chunk.
func (g *guard) chunk() {
	g.n++
	watchdog.Progress(g.ctx, g.n)
}

// finish ends the call as the consumer is done with the stream, after
// unblock if the call's end ran it: afterwards g.err says whether the call
// ended the stream first (its limit's error, ErrStalled for a stall, or
// ctx's cause).
func (g *guard) finish() error {
	g.once.Do(func() {
		if !g.stop() {
			<-g.cut // the call ended first
		}
		err := g.h.End(nil)
		if err == nil && g.stopped.Load() {
			err = context.Cause(g.ctx) // ctx ended it
		}
		var v *watchdog.VerdictError
		if errors.As(err, &v) && v.Rule == "handler_idle" {
			err = fmt.Errorf("%w: %s %q: no progress chunk within %v: %w", ErrStalled, v.Layer, v.Name, v.Budget, err)
		}
		g.err = err
	})
	return g.err
}
