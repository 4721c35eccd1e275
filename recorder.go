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
// or failing store never delays a verdict. Events of one session are appended
// in the order they were enqueued; a session whose append failed backs off
// (on the Watchdog's clock) without holding up other sessions. Nothing is
// dropped except events the store refuses for good (a lost terminal race,
// which is the point of the refusal, or an invalid event, which is reported
// by Close).
type recorder struct {
	store    EventStore
	clock    Clock
	log      *zap.Logger
	retryMin time.Duration
	retryMax time.Duration

	mu      sync.Mutex
	lanes   map[string]*lane
	ready   []*lane
	backoff map[*lane]struct{}
	refused []error // permanent refusals other than a lost race

	signal   chan struct{}
	barriers chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	ctx      context.Context // passed to Append; cancelled when Close gives up
	cancel   context.CancelFunc

	timer *clock.Timer // retry wake-up; owned by the recorder goroutine

	onEvent func(Event) // Observer.OnEvent, called after each successful append
}

// lane is the FIFO of one session's events that are not recorded yet.
type lane struct {
	id       string
	events   []Event
	attempts int
	lastErr  error
	retryAt  time.Time
	queued   bool // in ready
}

func newRecorder(c config) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	return &recorder{
		store:    c.store,
		clock:    c.clock,
		log:      c.log,
		retryMin: c.retryMin,
		retryMax: c.retryMax,
		lanes:    make(map[string]*lane),
		backoff:  make(map[*lane]struct{}),
		signal:   make(chan struct{}, 1),
		barriers: make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		onEvent:  c.obs.OnEvent,
	}
}

// enqueue adds e to its session's lane. It never blocks and makes no call
// into the store; it may be called with the Watchdog's lock held.
func (r *recorder) enqueue(e Event) {
	r.mu.Lock()
	l := r.lanes[e.AggregateID]
	if l == nil {
		l = &lane{id: e.AggregateID}
		r.lanes[e.AggregateID] = l
	}
	l.events = append(l.events, e)
	if _, waiting := r.backoff[l]; !waiting && !l.queued {
		l.queued = true
		r.ready = append(r.ready, l)
	}
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
	if l := r.lanes[id]; l != nil {
		return append([]Event(nil), l.events...)
	}
	return nil
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

// drain attempts every ready lane until none is left, then arms the retry
// timer for the earliest backed-off lane.
func (r *recorder) drain() {
	for {
		l := r.next()
		if l == nil {
			break
		}
		r.attempt(l, false)
	}
	r.armRetry()
}

// next promotes backed-off lanes whose retry is due and pops a ready lane.
func (r *recorder) next() *lane {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for l := range r.backoff {
		if !now.Before(l.retryAt) {
			delete(r.backoff, l)
			l.queued = true
			r.ready = append(r.ready, l)
		}
	}
	if len(r.ready) == 0 {
		return nil
	}
	l := r.ready[0]
	r.ready[0] = nil
	r.ready = r.ready[1:]
	l.queued = false
	return l
}

// attempt appends the head events of l, one Append per event. On a transient
// failure the lane backs off, unless final (Close's last pass).
func (r *recorder) attempt(l *lane, final bool) {
	for {
		r.mu.Lock()
		if len(l.events) == 0 {
			delete(r.lanes, l.id)
			r.mu.Unlock()
			return
		}
		e := l.events[0]
		r.mu.Unlock()

		err := r.store.Append(r.ctx, e)
		switch {
		case err == nil:
			if r.onEvent != nil {
				r.onEvent(e)
			}
		case errors.Is(err, ErrAlreadyDecided):
			r.log.Info("watchdog: window already decided elsewhere; event not recorded twice",
				zap.String("session_id", e.AggregateID), zap.Int("window", e.Window),
				zap.String("event_kind", e.Kind), zap.Error(err))
		case errors.Is(err, ErrInvalidEvent):
			r.log.Error("watchdog: store refused event", zap.String("session_id", e.AggregateID),
				zap.String("event_kind", e.Kind), zap.Error(err))
			r.mu.Lock()
			r.refused = append(r.refused, fmt.Errorf("%s session %q window %d: %w", e.Kind, e.AggregateID, e.Window, err))
			r.mu.Unlock()
		default:
			r.mu.Lock()
			l.attempts++
			l.lastErr = err
			d := r.retryMin << min(l.attempts-1, 30)
			if d <= 0 || d > r.retryMax {
				d = r.retryMax
			}
			l.retryAt = r.clock.Now().Add(d)
			if !final {
				r.backoff[l] = struct{}{}
			}
			attempts := l.attempts
			r.mu.Unlock()
			r.log.Warn("watchdog: append failed; will retry", zap.String("session_id", e.AggregateID),
				zap.String("event_kind", e.Kind), zap.Int("attempts", attempts),
				zap.Duration("retry_in", d), zap.Error(err))
			return
		}
		r.mu.Lock()
		l.events[0] = Event{}
		l.events = l.events[1:]
		l.attempts = 0
		l.lastErr = nil
		r.mu.Unlock()
	}
}

// armRetry arms one clock timer for the earliest backed-off lane.
func (r *recorder) armRetry() {
	r.mu.Lock()
	var earliest time.Time
	for l := range r.backoff {
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
// event, ignoring backoff, until ctx ends. It returns an error naming every
// event it could not record.
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
	lanes := make([]*lane, 0, len(r.lanes))
	for _, l := range r.lanes {
		lanes = append(lanes, l)
	}
	r.mu.Unlock()
	for _, l := range lanes {
		if ctx.Err() != nil {
			break
		}
		r.attempt(l, true)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []string
	var lastErr error
	for _, l := range r.lanes {
		for _, e := range l.events {
			lost = append(lost, fmt.Sprintf("%s session %q window %d (event %s)", e.Kind, e.AggregateID, e.Window, e.ID))
		}
		if l.lastErr != nil {
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
