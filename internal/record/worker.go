package record

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrStopped is returned by Barrier once the goroutine has stopped.
var ErrStopped = errors.New("stopped")

// Worker is the loop of a goroutine that drains its work when poked,
// answers settle barriers and stops when asked. The zero value is not
// usable; call NewWorker.
type Worker struct {
	signal   chan struct{}
	barriers chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	serving  atomic.Pointer[chan struct{}] // the barrier a drain in progress answers
}

// NewWorker returns a Worker whose goroutine is not started (see Loop).
func NewWorker() Worker {
	return Worker{signal: make(chan struct{}, 1), barriers: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Poke asks the goroutine to drain; it never blocks.
func (k *Worker) Poke() {
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// Loop runs drain whenever poked or asked for a barrier, until Stop; it is
// the goroutine's body. A goroutine that is no longer current (another took
// over its work while it was stuck, see takeOver) leaves done to it.
func (k *Worker) Loop(drain func(), current func() bool) {
	defer func() {
		if current() {
			close(k.done)
		}
	}()
	for {
		select {
		case <-k.stop:
			return
		case <-k.signal:
			drain()
		case b := <-k.barriers:
			bp := &b
			k.serving.Store(bp)
			drain()
			if k.serving.CompareAndSwap(bp, nil) {
				close(b)
			}
		}
	}
}

// takeOver is the start of a goroutine that takes over the loop from one
// stuck in drain: it answers the barrier the stuck one was serving, after a
// drain of its own, then loops.
func (k *Worker) takeOver(drain func(), current func() bool) {
	if bp := k.serving.Swap(nil); bp != nil {
		drain()
		close(*bp)
	}
	k.Loop(drain, current)
}

// Stop ends Loop and waits for it. Call it once.
func (k *Worker) Stop() {
	close(k.stop)
	<-k.done
}

// StopWithin ends Loop and waits for it until ctx ends. Call it once.
func (k *Worker) StopWithin(ctx context.Context) error {
	close(k.stop)
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Barrier returns once a drain that started after the call has finished,
// ErrStopped if the goroutine has stopped, or ctx's error.
func (k *Worker) Barrier(ctx context.Context) error {
	return RoundTrip(ctx, k.barriers, k.done)
}

// RoundTrip hands a fresh channel to the goroutine that serves reqs and
// returns once that goroutine closes it: nil, ErrStopped if done is closed
// first, or ctx's error.
func RoundTrip(ctx context.Context, reqs chan<- chan struct{}, done <-chan struct{}) error {
	req := make(chan struct{})
	select {
	case reqs <- req:
	case <-done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
