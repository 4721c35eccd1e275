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
// A guard is a watchdog.CallWith call named name, run on the session's
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
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// ErrStalled matches the error of a stream stopped because no progress chunk
// came within its first-chunk or idle limit. A stream stopped by its cap
// matches watchdog.ErrDeadlineExceeded but not ErrStalled.
var ErrStalled = errors.New("stream: stalled")

// Limits are a stream's limits.
type Limits struct {
	// FirstChunk is the longest until the first progress chunk, from the
	// guard's start (the time a model may think before its first token).
	// Zero means Idle.
	FirstChunk time.Duration
	// Idle is the longest between two progress chunks. Zero means none.
	Idle time.Duration
	// Cap is the longest the stream may run, from the guard's start;
	// nothing extends it. Required (positive).
	Cap time.Duration
}

// guard is what the three shapes share: the call that holds the limits,
// run by a goroutine until the stream ends, and the progress count.
type guard struct {
	ctx     context.Context // the call's, for Progress; nil if the call never started
	n       uint64          // progress chunks so far; the consumer's goroutine only
	stopped atomic.Bool     // the call ended first (a stall, the cap, ctx): the stream is being closed
	done    chan struct{}   // closed when the consumer is done with the stream
	ended   chan struct{}   // closed when the call returned; err is set before
	err     error           // why the call ended the stream, nil if it did not
	once    sync.Once       // closes done
	unblock func()          // closes the stream, or cancels the producer; called at most once, by the call's goroutine
}

// start runs the call for the stream and returns once it is armed (or
// refused). unblock is called, on the call's goroutine, if the call ends
// before the consumer is done.
func (g *guard) start(ctx context.Context, name string, l Limits, unblock func()) {
	g.done, g.ended, g.unblock = make(chan struct{}), make(chan struct{}), unblock
	ready := make(chan context.Context, 1)
	go func() {
		defer close(g.ended)
		err := watchdog.CallWith(ctx, name, watchdog.CallLimits{Cap: l.Cap, Idle: l.Idle, FirstProgress: l.FirstChunk},
			func(cctx context.Context) error {
				ready <- cctx
				select {
				case <-g.done:
					return nil
				case <-cctx.Done():
					return context.Cause(cctx)
				}
			})
		if err == nil {
			return // the consumer was done first
		}
		var v *watchdog.VerdictError
		if errors.As(err, &v) && v.Rule == "handler_idle" {
			err = fmt.Errorf("%w: %s %q: no progress chunk within %v: %w", ErrStalled, v.Layer, v.Name, v.Budget, err)
		}
		g.err = err
		g.stopped.Store(true)
		if g.unblock != nil {
			g.unblock()
		}
	}()
	select {
	case g.ctx = <-ready:
	case <-g.ended: // refused: bad limits, or ctx already done
	}
}

// refuse is start for bad input found before the call: the guard never
// runs (g.ctx stays nil) and finish returns err.
func (g *guard) refuse(err error) {
	g.done, g.ended, g.err = make(chan struct{}), make(chan struct{}), err
	close(g.ended)
}

// chunk counts one progress chunk.
func (g *guard) chunk() {
	g.n++
	watchdog.Progress(g.ctx, g.n)
}

// finish tells the call the consumer is done and waits for it: afterwards
// g.err says whether the call ended the stream first.
func (g *guard) finish() error {
	g.once.Do(func() { close(g.done) })
	<-g.ended
	return g.err
}
