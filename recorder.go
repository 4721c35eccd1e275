package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// recorder appends events to the store on its own goroutine, so that a slow
// or failing store never delays a verdict. Events are appended in the order
// they were enqueued; when a session's append fails, that session's events
// back off (on the Watchdog's clock) and keep their order, while other
// sessions' events go on. Nothing is dropped except events the store refuses
// for good (a lost terminal race, which is the point of the refusal, or an
// invalid event, which is reported by Close).
type recorder struct {
	store    EventStore
	clock    Clock
	log      *zap.Logger
	retryMin time.Duration
	retryMax time.Duration

	mu      sync.Mutex
	queue   []Event // queue[head:] is not yet recorded, in enqueue order
	head    int
	blocked map[string]*lane // sessions backing off after a failed append
	refused []error          // permanent refusals other than a lost race

	signal   chan struct{}
	barriers chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	ctx      context.Context // passed to Append; cancelled when Close gives up
	cancel   context.CancelFunc

	timer *clock.Timer // retry wake-up; owned by the recorder goroutine

	onEvent func(Event) // Observer.OnEvent, called after each successful append
}

// lane is the backoff state of one session whose append failed.
type lane struct {
	attempts int
	lastErr  error
	retryAt  time.Time
}

func newRecorder(c config) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	return &recorder{
		store:    c.store,
		clock:    c.clock,
		log:      c.log,
		retryMin: c.retryMin,
		retryMax: c.retryMax,
		blocked:  make(map[string]*lane),
		signal:   make(chan struct{}, 1),
		barriers: make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		onEvent:  c.obs.OnEvent,
	}
}

// enqueue adds e to the queue. It never blocks and makes no call into the
// store; it may be called with the Watchdog's lock held.
func (r *recorder) enqueue(e Event) {
	r.mu.Lock()
	r.queue = append(r.queue, e)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// pending returns a copy of the events of session id not recorded yet.
func (r *recorder) pending(id string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.queue[r.head:] {
		if e.AggregateID == id {
			out = append(out, e)
		}
	}
	return out
}

// run is the recorder goroutine.
func (r *recorder) run() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.signal:
			r.drain()
		case b := <-r.barriers:
			r.drain()
			close(b)
		}
	}
}

// barrier returns once every event enqueued before the call whose attempt is
// due at or before the clock's now has been attempted.
func (r *recorder) barrier(ctx context.Context) error {
	b := make(chan struct{})
	select {
	case r.barriers <- b:
	case <-r.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain attempts, in order, every event whose session is not backing off,
// then arms the retry timer for the earliest backed-off session.
func (r *recorder) drain() {
	now := r.clock.Now()
	r.mu.Lock()
	for id, l := range r.blocked {
		if !now.Before(l.retryAt) {
			delete(r.blocked, id)
		}
	}
	r.mu.Unlock()
	r.mu.Lock()
	i := r.head
	r.mu.Unlock()
	for {
		r.mu.Lock()
		for i < len(r.queue) && r.blocked[r.queue[i].AggregateID] != nil {
			i++
		}
		if i >= len(r.queue) {
			r.compactLocked()
			r.mu.Unlock()
			break
		}
		e := r.queue[i]
		r.mu.Unlock()
		if r.attempt(e, false) {
			r.mu.Lock()
			r.removeLocked(i) // only this goroutine removes, so i is still e's index
			r.mu.Unlock()
		}
		i++
	}
	r.armRetry()
}

// removeLocked removes queue[i]: the blocked events before it (if any) move
// up one slot, so removing from the head costs nothing.
func (r *recorder) removeLocked(i int) {
	copy(r.queue[r.head+1:i+1], r.queue[r.head:i])
	r.queue[r.head] = Event{}
	r.head++
}

// compactLocked releases the space of recorded events.
func (r *recorder) compactLocked() {
	if r.head == len(r.queue) {
		r.queue, r.head = r.queue[:0], 0
		return
	}
	if r.head > 1024 && r.head > len(r.queue)/2 {
		n := copy(r.queue, r.queue[r.head:])
		clear(r.queue[n:])
		r.queue, r.head = r.queue[:n], 0
	}
}

// attempt appends e. It reports whether e left the queue (recorded, or
// refused for good). On a transient failure e's session backs off.
func (r *recorder) attempt(e Event, final bool) bool {
	err := r.store.Append(r.ctx, e)
	switch {
	case err == nil:
		r.mu.Lock()
		delete(r.blocked, e.AggregateID)
		r.mu.Unlock()
		if r.onEvent != nil {
			r.onEvent(e)
		}
		return true
	case errors.Is(err, ErrAlreadyDecided):
		r.log.Info("watchdog: window already decided elsewhere; event not recorded twice",
			zap.String("session_id", e.AggregateID), zap.Int("window", e.Window),
			zap.String("event_kind", e.Kind), zap.Error(err))
		return true
	case errors.Is(err, ErrInvalidEvent):
		r.log.Error("watchdog: store refused event", zap.String("session_id", e.AggregateID),
			zap.String("event_kind", e.Kind), zap.Error(err))
		r.mu.Lock()
		r.refused = append(r.refused, fmt.Errorf("%s session %q window %d: %w", e.Kind, e.AggregateID, e.Window, err))
		r.mu.Unlock()
		return true
	}
	r.mu.Lock()
	l := r.blocked[e.AggregateID]
	if l == nil {
		l = &lane{}
		r.blocked[e.AggregateID] = l
	}
	l.attempts++
	l.lastErr = err
	d := r.retryMin << min(l.attempts-1, 30)
	if d <= 0 || d > r.retryMax {
		d = r.retryMax
	}
	l.retryAt = r.clock.Now().Add(d)
	attempts := l.attempts
	r.mu.Unlock()
	if !final {
		r.log.Warn("watchdog: append failed; will retry", zap.String("session_id", e.AggregateID),
			zap.String("event_kind", e.Kind), zap.Int("attempts", attempts),
			zap.Duration("retry_in", d), zap.Error(err))
	}
	return false
}

// armRetry arms one clock timer for the earliest backed-off session.
func (r *recorder) armRetry() {
	r.mu.Lock()
	var earliest time.Time
	for _, l := range r.blocked {
		if earliest.IsZero() || l.retryAt.Before(earliest) {
			earliest = l.retryAt
		}
	}
	r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if earliest.IsZero() {
		return
	}
	r.timer = r.clock.AfterFunc(max(earliest.Sub(r.clock.Now()), 0), r.poke)
}

// close stops the goroutine, then makes one last attempt at every pending
// event in order, ignoring backoff (a session whose append fails keeps its
// later events), until ctx ends. It returns an error naming every event it
// could not record.
func (r *recorder) close(ctx context.Context) error {
	stopCancel := context.AfterFunc(ctx, r.cancel) // unblocks a hung Append
	defer stopCancel()
	defer r.cancel()
	close(r.stop)
	<-r.done
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}

	r.mu.Lock()
	queue := r.queue[r.head:]
	r.queue, r.head = nil, 0
	clear(r.blocked)
	r.mu.Unlock()
	var kept []Event
	failed := map[string]bool{}
	for _, e := range queue {
		if ctx.Err() != nil || failed[e.AggregateID] || !r.attempt(e, true) {
			failed[e.AggregateID] = true
			kept = append(kept, e)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []string
	var lastErr error
	for _, e := range kept {
		lost = append(lost, fmt.Sprintf("%s session %q window %d (event %s)", e.Kind, e.AggregateID, e.Window, e.ID))
		if l := r.blocked[e.AggregateID]; l != nil && l.lastErr != nil {
			lastErr = l.lastErr
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	sort.Strings(lost)
	errs := append([]error(nil), r.refused...)
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d event(s): %s: last error: %w", ErrNotRecorded, len(lost), strings.Join(lost, "; "), lastErr))
	}
	return errors.Join(errs...)
}
