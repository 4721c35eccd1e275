// Package relay is a subscription's delivery: an unbounded queue drained by
// its own goroutine onto a channel, so that a publisher never waits for a
// slow reader. The stores' subscriptions use it.
package relay

import (
	"context"
	"sync"
)

// Relay forwards pushed values, in order, to its channel. Push is safe for
// concurrent use; Run is its goroutine. Create it with New.
type Relay[T any] struct {
	mu     sync.Mutex
	queue  []T
	signal chan struct{}
	out    chan T
}

// New returns a Relay; start Run on a goroutine of its own.
func New[T any]() *Relay[T] {
	return &Relay[T]{signal: make(chan struct{}, 1), out: make(chan T)}
}

// C is the channel the values are delivered on; Run closes it when it ends.
func (r *Relay[T]) C() <-chan T { return r.out }

// Push queues v. It never blocks.
func (r *Relay[T]) Push(v T) {
	r.mu.Lock()
	r.queue = append(r.queue, v)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// Run delivers the queued values until ctx ends, then closes the channel.
func (r *Relay[T]) Run(ctx context.Context) {
	defer close(r.out)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.signal:
		}
		r.mu.Lock()
		q := r.queue
		r.queue = nil
		r.mu.Unlock()
		for _, v := range q {
			select {
			case r.out <- v:
			case <-ctx.Done():
				return
			}
		}
	}
}
