package stream

import (
	"context"
	"fmt"
	"sync"

	"github.com/sessionwatchdog/watchdog"
)

// Iterator is the shape of the streams of openai-go (ssestream.Stream),
// anthropic-sdk-go and most Go SDKs that stream: Next blocks until the next
// chunk, Close releases the stream (and unblocks a Next in progress).
type Iterator[T any] interface {
	Next() bool
	Current() T
	Err() error
	Close() error
}

// Guarded is a guarded Iterator (see Guard). Like the streams it wraps, it
// is for one goroutine, except that the guard itself closes the stream from
// the call's end (a goroutine of the context package) on a stall, which is what unblocks a Next in progress.
// Always Close it (defer it): until Close, or until Next has returned
// false, the guard runs, and a stream left unread stalls, is recorded as
// such and closed. Time the caller spends between two Next calls counts
// toward the idle limit too: consume promptly.
type Guarded[T any] struct {
	g        guard
	it       Iterator[T] // set once, under mu, before Guard returns
	progress func(T) bool
	mu       sync.Mutex // it, closed and closeErr against the guard's unblock
	closed   bool
	closeErr error
}

// Guard opens a stream with open and guards it with the limits l, as a call
// named name on ctx (see the package doc). open is called once, before
// Guard returns, with the guard's context: it must make its request on that
// context (the SDKs' NewStreaming(ctx, ...) do) and return the stream,
// whose Next then reports a failed request as SDK streams do. The time open
// takes counts toward l.FirstProgress and l.Cap; a stall while it waits for
// the server's headers cancels its context. progress says whether a chunk is
// progress (nil: every chunk is).
//
// Use the result in place of the stream: Next returns false once the
// stream ends or stalls; Err then returns the stream's error, or the
// guard's (an error matching ErrStalled, or watchdog.ErrDeadlineExceeded
// for the cap, or ctx's cause), which takes precedence; Close closes it and
// ends the guard. Bad input (a nil open, a Cap that is not positive, an
// invalid name), or a ctx already done, makes the first Next return false
// and Err return the reason (an error wrapping watchdog.ErrInvalidArgument,
// or ctx's cause), without calling open; so does an open that returns nil.
func Guard[T any](ctx context.Context, name string, open func(ctx context.Context) Iterator[T], l watchdog.CallLimits, progress func(T) bool) *Guarded[T] {
	s := &Guarded[T]{progress: progress}
	if open == nil {
		s.g.refuse(fmt.Errorf("%w: stream %q: nil open function", watchdog.ErrInvalidArgument, name))
		return s
	}
	s.g.start(ctx, name, l, s.closeStream)
	if s.g.ctx == nil {
		return s
	}
	it := open(s.g.ctx)
	if it == nil {
		it = failed[T]{fmt.Errorf("%w: stream %q: open returned a nil stream", watchdog.ErrInvalidArgument, name)}
	}
	s.mu.Lock()
	s.it = it
	if s.closed { // the guard stopped while open ran: close what it returned
		s.closeErr = it.Close()
	}
	s.mu.Unlock()
	return s
}

// Next advances to the next chunk, as the wrapped stream's Next does.
func (s *Guarded[T]) Next() bool {
	if s.g.ctx == nil || s.g.stopped.Load() {
		return false
	}
	if !s.it.Next() {
		s.g.finish()
		return false
	}
	if s.progress == nil || s.progress(s.it.Current()) {
		s.g.chunk()
	}
	return true
}

// Current returns the current chunk (T's zero value if the stream was
// never opened).
func (s *Guarded[T]) Current() T {
	if s.it == nil {
		var zero T
		return zero
	}
	return s.it.Current()
}

// Err returns the guard's error if it stopped the stream (or refused to
// open it), else the stream's.
func (s *Guarded[T]) Err() error {
	if s.g.ctx == nil || s.g.stopped.Load() {
		if err := s.g.finish(); err != nil {
			return err
		}
	}
	if s.it == nil {
		return nil
	}
	return s.it.Err()
}

// Close ends the guard and closes the stream (once: if the guard closed it
// on a stall, Close returns that Close's error).
func (s *Guarded[T]) Close() error {
	s.g.finish()
	s.closeStream()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

// closeStream closes the stream once; called when the guard's call ends first, on a
// stall, maybe before open has returned it (Guard closes it then).
func (s *Guarded[T]) closeStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.it != nil {
		s.closeErr = s.it.Close()
	}
}

// failed is the stream of an open that returned none.
type failed[T any] struct{ err error }

func (f failed[T]) Next() bool   { return false }
func (f failed[T]) Current() T   { var zero T; return zero }
func (f failed[T]) Err() error   { return f.err }
func (f failed[T]) Close() error { return nil }
