// Package bound bounds a wait by a context: how the Watchdog's Close waits
// for its goroutines and for user code (a Clock) that may never return.
package bound

import "context"

// Done waits for done to be closed until ctx ends; it reports whether it
// was (done wins when both are).
func Done(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Call runs fn on a goroutine of its own and waits for its result until ctx
// ends; ok is false if fn had not returned by then (it is left running, and
// its result is dropped). A result ready when ctx ends wins.
func Call[T any](ctx context.Context, fn func() T) (v T, ok bool) {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v = <-ch:
		return v, true
	case <-ctx.Done():
	}
	select {
	case v = <-ch:
		return v, true
	default:
		return v, false
	}
}
