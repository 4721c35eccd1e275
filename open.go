package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// reserve claims id for a Start or Resume that waits for the store.
func (w *Watchdog) reserve(s *Session) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.sessions.Get(s.id) != nil {
		return fmt.Errorf("%w: %q", ErrAlreadyWatched, s.id)
	}
	w.sessions.Put(s)
	return nil
}

func (w *Watchdog) release(s *Session) {
	w.mu.Lock()
	w.sessions.Del(s)
	w.mu.Unlock()
}

// openings are the records a Watchdog waits for the store's answer on,
// with a store that arbitrates (see Arbiter): openings, claims of an open
// window and stops; per event_id, how the wait ends.
type openings struct {
	mu      sync.Mutex
	waiting map[string]*opening
}

// opening is one Start or Resume waiting for the store's answer. Once the
// caller gave up (its context ended), a recorded opening is ended at once
// with a stop event, so that no window is left open with no supervisor.
type opening struct {
	answer    chan error // buffered; the store's answer
	abandoned bool       // guarded by openings.mu
	s         *Session
}

// resumeMarks records on e, s's resume event, who amended the policy and
// why if Amend opened s's window, and the progress saved; if the resume
// continues an open window, what from: the idle floor (observed_since, see
// carry) and the evidence carried over from the window's records.
func (s *Session) resumeMarks(e *Event) {
	r := s.rare // set before the session was shared
	if r == nil {
		return
	}
	if r.by != "" {
		e.By, e.Why = r.by, r.why
	}
	e.ProgressValue, e.Payload = r.progress, r.payload // carried over: a store that keeps only recent windows still has it
	if r.continued {
		if since := s.observedSince(); !since.Equal(s.windowStartedAt) { // zero: the window's start
			e.ObservedSince = since
		}
		if r.carried {
			sn, _ := s.snapshot(e.OccurredAt) // not shared yet: nothing touched it after e's instant
			e.EvidenceSummary = s.summary(sn, e.OccurredAt)
		}
	}
}

// await registers a wait for the store's answer on event id, of s.
func (w *Watchdog) await(id string, s *Session) *opening {
	op := &opening{answer: make(chan error, 1), s: s}
	o := w.openings
	o.mu.Lock()
	o.waiting[id] = op
	o.mu.Unlock()
	return op
}

// stopOutcome waits for the store's answer on s's stop event id, bounded by
// the context s was started with: nil if the stop was recorded (or the
// wait gave up), else the error that says who won, wrapping the store's
// refusal and the winner's cause, which s's state then keeps.
func (w *Watchdog) stopOutcome(s *Session, op *opening, id string) error {
	err := w.answer(s.vctx.Context, op, id)
	if err == nil || errors.Is(err, errAbandoned) ||
		!errors.Is(err, ErrAlreadyDecided) && !errors.Is(err, ErrAlreadyWatched) {
		return nil // recorded, or given up, or refused for good (Close reports it)
	}
	cause := error(ErrSessionStopped)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.vctx.Context), 10*time.Second)
	defer cancel()
	if evs, lerr := w.loadEvents(ctx, s.id); lerr == nil {
		for _, e := range evs {
			if e.Window == int(s.window) && e.Terminal() {
				cause = causeOf(e)
			}
		}
	}
	var v *VerdictError
	if errors.As(cause, &v) {
		w.mu.Lock()
		s.state.Store(stateFired)
		s.rw().fired = v
		w.mu.Unlock()
	}
	return fmt.Errorf("watchdog: %q window %d: the stop lost: %w: %w", s.id, s.window, err, cause)
}

// arbitrates reports whether store refuses a second opening of a window;
// a panicking Arbitrates counts as false.
func arbitrates(store EventStore) (ok bool) {
	a, _ := store.(Arbiter)
	if a == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return a.Arbitrates()
}

// ReasonAlreadyDecided is the reason of a superseded event recorded when
// the cancel of an acting decision was refused because another Watchdog (or
// process) had already ended the window: its error field names the event
// that did.
const ReasonAlreadyDecided = "already_decided"

// settled is the recorder's Settled hook: a cancel that lost its window's
// race gets its decision an outcome; an opening's answer goes to its
// waiter, or a window whose waiter gave up is ended.
func (w *Watchdog) settled(e *Event, err error) {
	if e.Kind == KindCancel && e.DecidedByDecisionID != "" && errors.Is(err, ErrAlreadyDecided) {
		lost := *e
		lost.ID, lost.Seq, lost.Kind, lost.FiredAt = "", 0, KindSuperseded, time.Time{}
		lost.Reason, lost.Error = ReasonAlreadyDecided, err.Error()
		lost.OccurredAt = w.now().Add(w.recOffset()).UTC()
		lost.ElapsedSeconds = lost.OccurredAt.Sub(lost.WindowStartedAt).Seconds()
		w.rec.Push(entry{ev: &lost, seq: w.ids.Next()}) // its instants are the wall's already: not shifted again
		w.rec.Poke()
		return
	}
	if w.openings == nil || e.Kind != KindStart && e.Kind != KindResume && e.Kind != KindStop {
		if errors.Is(err, ErrAlreadyWatched) && w.fleet != nil {
			w.disown(e.AggregateID, e.Window, err) // fenced: another owner holds the window
		}
		return
	}
	o := w.openings
	o.mu.Lock()
	op := o.waiting[e.ID]
	delete(o.waiting, e.ID)
	abandoned := op != nil && op.abandoned
	o.mu.Unlock()
	switch {
	case op == nil:
	case !abandoned:
		op.answer <- err
	case err == nil && e.Kind != KindStop:
		// Recorded after Start gave up: the window is this Watchdog's, and
		// nobody watches it. End it.
		s := op.s
		stop := s.event(KindStop, w.now())
		stop.Reason = StopCanceled
		w.record(nil, stop)
	}
}

// open records s's opening event and, with a store that arbitrates
// openings, waits for the store's answer before activating s; without one,
// it activates s at once (the event is recorded in the background).
func (w *Watchdog) open(ctx context.Context, s *Session, kind string, reserved, opens bool) (*Session, error) {
	if w.openings == nil {
		return s.orCancel(w.activate(s, kind, reserved, false, nil))
	}
	if !reserved {
		if err := w.reserve(s); err != nil {
			return s.orCancel(err)
		}
	}
	err := w.awaitLease(ctx)
	if err == nil {
		e := s.event(kind, w.now())
		e.ID, e.Policy, e.OpensWindow = w.newID(), &s.cfg.policy, opens
		s.resumeMarks(&e)
		op := w.await(e.ID, s)
		w.record(nil, e)
		err = w.answer(ctx, op, e.ID)
		switch {
		case errors.Is(err, errAbandoned):
		case errors.Is(err, ErrAlreadyWatched):
			err = fmt.Errorf("%w: %q window %d is open elsewhere: %w", ErrAlreadyWatched, s.id, s.window, err)
		case err != nil:
			err = fmt.Errorf("watchdog: %q window %d: the store refused its opening: %w", s.id, s.window, err)
		default:
			err = w.activate(s, kind, true, true, nil)
		}
	}
	if err != nil {
		w.release(s)
	}
	return s.orCancel(err)
}

// orCancel returns s if err is nil, else cancels s's context with err.
func (s *Session) orCancel(err error) (*Session, error) {
	if err != nil {
		s.cancel(err)
		return nil, err
	}
	return s, nil
}

// answer waits for the store's answer on event id, until ctx ends or the
// Watchdog closes: then it gives up (see abandon).
func (w *Watchdog) answer(ctx context.Context, op *opening, id string) error {
	select {
	case err := <-op.answer:
		return err
	case <-ctx.Done():
		return w.abandon(op, id, context.Cause(ctx))
	case <-w.done:
		return w.abandon(op, id, ErrClosed)
	}
}

// errAbandoned marks the error of an opening whose caller gave up.
var errAbandoned = errors.New("the store did not answer in time")

// abandon gives up waiting for the opening id: it returns the store's
// answer if it came meanwhile, else an error wrapping errAbandoned and
// cause (the opening, if recorded later, is then ended at once).
func (w *Watchdog) abandon(op *opening, id string, cause error) error {
	o := w.openings
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, waiting := o.waiting[id]; !waiting {
		return <-op.answer
	}
	op.abandoned = true
	return fmt.Errorf("watchdog: %q window %d: %w before the context ended: %w", op.s.id, op.s.window, errAbandoned, cause)
}
