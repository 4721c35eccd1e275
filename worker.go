package watchdog

import "context"

// worker is the loop shared by the Watchdog's recorder and action
// goroutines: it drains its work when poked, answers the settle barriers of
// Check, and stops when asked. The zero value is not usable; call
// newWorker.
type worker struct {
	signal   chan struct{}
	barriers chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

func newWorker() worker {
	return worker{signal: make(chan struct{}, 1), barriers: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// poke asks the goroutine to drain; it never blocks.
func (k *worker) poke() {
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// loop runs drain whenever poked or asked for a barrier, until stop is
// closed; it closes done when it returns.
func (k *worker) loop(drain func()) {
	defer close(k.done)
	for {
		select {
		case <-k.stop:
			return
		case <-k.signal:
			drain()
		case b := <-k.barriers:
			drain()
			close(b)
		}
	}
}

// barrier returns once a drain that started after the call has finished,
// ErrClosed if the goroutine has stopped, or ctx's error.
func (k *worker) barrier(ctx context.Context) error {
	return roundTrip(ctx, k.barriers, k.done)
}

// roundTrip hands a fresh channel to the goroutine that serves reqs and
// returns once that goroutine closes it: nil, ErrClosed if done is closed
// first, or ctx's error.
func roundTrip(ctx context.Context, reqs chan<- chan struct{}, done <-chan struct{}) error {
	req := make(chan struct{})
	select {
	case reqs <- req:
	case <-done:
		return ErrClosed
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
