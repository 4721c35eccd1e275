package stream

import (
	"context"
	"sync"
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
// another goroutine on a stall, which is what unblocks a Next in progress.
// Always Close it (defer it): until Close, or until Next has returned
// false, the guard runs, and a stream left unread stalls, is recorded as
// such and closed. Time the caller spends between two Next calls counts
// toward the idle limit too: consume promptly.
type Guarded[T any] struct {
	g        guard
	it       Iterator[T]
	progress func(T) bool
	closing  sync.Once
	closeErr error
}

// Guard guards it, a stream opened under ctx, with the limits l, as a call
// named name (see the package doc). progress says whether a chunk is
// progress (nil: every chunk is). Use the result in place of it: Next
// returns false once the stream ends or stalls; Err then returns the
// stream's error, or the guard's (an error matching ErrStalled, or
// watchdog.ErrDeadlineExceeded for the cap, or ctx's cause), which takes
// precedence; Close closes it and ends the guard. Limits the call refuses
// (a Cap that is not positive), or a ctx already done, make the first Next
// return false and Err return the reason (an error wrapping
// watchdog.ErrInvalidArgument, or ctx's cause); the stream is closed at
// Close.
func Guard[T any](ctx context.Context, name string, it Iterator[T], l Limits, progress func(T) bool) *Guarded[T] {
	s := &Guarded[T]{it: it, progress: progress}
	s.g.start(ctx, name, l, func() { s.closeStream() })
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

// Current returns the current chunk.
func (s *Guarded[T]) Current() T { return s.it.Current() }

// Err returns the guard's error if it stopped the stream, else the stream's.
func (s *Guarded[T]) Err() error {
	if s.g.ctx == nil || s.g.stopped.Load() {
		if err := s.g.finish(); err != nil {
			return err
		}
	}
	return s.it.Err()
}

// Close ends the guard and closes the stream (once: if the guard closed it
// on a stall, Close returns that Close's error).
func (s *Guarded[T]) Close() error {
	s.g.finish()
	s.closeStream()
	return s.closeErr
}

func (s *Guarded[T]) closeStream() {
	s.closing.Do(func() { s.closeErr = s.it.Close() })
}
