package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/seconds"
)

// Follow returns a context derived from parent that is cancelled when a
// terminal event is recorded for the session's current window (the latest
// window in the store when Follow is called), including one recorded before
// Follow was called. Its cause is a *VerdictError for a cancel (so
// errors.Is(context.Cause(ctx), ErrWallClockExceeded) holds) and
// ErrSessionStopped for a stop (wrapped with the stop reason code when it
// is not "completed", for example owner_lost after an adoption). It lets a
// component that did not start the watch exit cleanly when the watchdog
// fires (cooperative cancellation).
//
// Follow has a backstop, so that a worker never runs on unsupervised when
// every supervisor is gone: from the window's start or resume record (read
// at Follow, or received later) it knows the window's deadline (the
// earliest of the wall-clock budget from the window's start and the session
// ceiling from the session's start, among the rules the recorded policy
// acts on); with no terminal event FollowGrace after it, the context ends
// with cause ErrSupervisorLost. A record of the window received after the
// deadline (a decision, a failed action retried) shows a supervisor at work
// and moves the backstop to FollowGrace after its arrival. A window whose
// record has no policy, or whose absolute rules are all in shadow mode, has
// no backstop.
//
// The backstop reads the clock given with WithClock among opts (default:
// the real clock; of the other options only WithLogger counts: it logs the
// panics recovered from the store, returned as errors, and from the Clock,
// guarded as in New), which must agree with the supervisors' to within
// FollowGrace: a follower whose host clock runs, or was stepped, ahead by
// more gives the supervisor up early. In tests on a fake clock pass the same
// clock; on the real clock, a recorded deadline from a fake one is long
// past and ends the follower at once.
//
// store must implement Subscriber, or Follow returns an error wrapping
// ErrInvalidArgument. Call the returned CancelFunc when done: it ends the
// subscription and its goroutine.
func Follow(parent context.Context, store EventStore, sessionID string, opts ...Option) (context.Context, context.CancelFunc, error) {
	if parent == nil {
		return nil, nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := checkName("session id", sessionID); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	sub, ok := store.(Subscriber) // not a nil store either
	if !ok {
		return nil, nil, fmt.Errorf("%w: follow %q: the store (%T) does not implement Subscriber", ErrInvalidArgument, sessionID, store)
	}
	c := configOf(opts)
	ctx, cancel := context.WithCancelCause(parent)
	stop := func() { cancel(context.Canceled) }
	var ch <-chan Event
	if err := c.faults.call("the store's Subscribe", func() (err error) { ch, err = sub.Subscribe(ctx, sessionID); return err }); err != nil || ch == nil {
		stop()
		return nil, nil, fmt.Errorf("watchdog: follow %q: subscribe: %w", sessionID, cmp.Or(err, errors.New("a nil channel and no error")))
	}
	var evs []Event
	if err := c.faults.call("the store's Load", func() (err error) { evs, err = store.Load(ctx, sessionID); return err }); err != nil {
		stop()
		return nil, nil, fmt.Errorf("watchdog: follow %q: load: %w", sessionID, err)
	}
	evs = inAppendOrder(evs)
	window := 1
	for _, e := range evs {
		window = max(window, e.Window)
	}
	for _, e := range evs {
		if e.Window == window && e.Terminal() {
			cancel(causeOf(e))
		}
	}
	b := &followBackstop{clock: c.clock, id: sessionID, window: window, cancel: cancel}
	if due, ok := windowDeadline(evs, window); ok && ctx.Err() == nil {
		b.arm(window, due)
	}
	go func() {
		defer b.stop()
		for e := range ch {
			switch {
			case e.Window < window:
			case e.Terminal():
				cancel(causeOf(e))
			case e.Kind == KindStart || e.Kind == KindResume:
				if due, ok := windowDeadline([]Event{e}, e.Window); ok {
					b.arm(e.Window, due) // the window's record came after Follow
				}
			case e.Kind == KindCheckpoint && e.Owner == "": // a remote worker's: no sign of a supervisor
			default:
				b.alive()
			}
		}
	}()
	return ctx, stop, nil
}

// followBackstop is Follow's backstop, used by Follow's goroutine only
// after Follow armed it.
type followBackstop struct {
	clock  Clock
	id     string
	window int
	cancel context.CancelCauseFunc
	due    time.Time    // the window's deadline; zero: no backstop
	until  time.Time    // when the supervisor is given up
	timer  *clock.Timer // nil when not armed
}

// arm gives the supervisor up FollowGrace after the window's deadline due.
func (b *followBackstop) arm(window int, due time.Time) {
	b.window, b.due = window, due
	b.set(due.Add(FollowGrace))
}

// alive moves the backstop to FollowGrace from now when a record of the
// window arrives after its deadline: a supervisor is at work.
func (b *followBackstop) alive() {
	if b.due.IsZero() {
		return
	}
	if t := b.clock.Now().Add(FollowGrace); t.After(b.until) {
		b.set(t)
	}
}

// set gives the supervisor up at until.
func (b *followBackstop) set(until time.Time) {
	b.until = until
	b.stop()
	err := fmt.Errorf("%w: session %q window %d: no terminal event %v after its deadline %s",
		ErrSupervisorLost, b.id, b.window, FollowGrace, b.due.UTC().Format(time.RFC3339Nano))
	if d := until.Sub(b.clock.Now()); d > 0 {
		b.timer = b.clock.AfterFunc(d, func() { b.cancel(err) })
	} else {
		b.cancel(err) // at once, also on a fake clock that fires timers only as it moves
	}
}

func (b *followBackstop) stop() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

// FollowGrace is how long after a window's recorded deadline Follow waits
// for its terminal event before it gives the supervisor up
// (ErrSupervisorLost): enough for a supervisor that fired on time to record
// its cancel through a store that is behind.
const FollowGrace = time.Minute

// windowDeadline is the deadline of window as its start or resume records
// say: the earliest of the absolute rules the recorded policy acts on.
func windowDeadline(evs []Event, window int) (time.Time, bool) {
	var due time.Time
	for _, e := range evs {
		if e.Window != window || e.Policy == nil || (e.Kind != KindStart && e.Kind != KindResume) ||
			e.Policy.Validate() != nil {
			continue
		}
		l := e.Policy.limits()
		due = time.Time{}
		if !l.Shadow.Has(decide.RuleWallClock) && !e.WindowStartedAt.IsZero() {
			due = later(e.WindowStartedAt, e.BudgetFrom).Add(l.WallClock)
		}
		if c := l.SessionCeiling; c > 0 && !l.Shadow.Has(decide.RuleSessionCeiling) && !e.SessionStartedAt.IsZero() {
			if d := e.SessionStartedAt.Add(c); due.IsZero() || d.Before(due) {
				due = d
			}
		}
	}
	return due, !due.IsZero()
}

var secondsDuration = seconds.FromFloat

// causeOf is the context cause a terminal event stands for.
func causeOf(e Event) error {
	if e.Kind == KindCancel {
		v := &VerdictError{
			SessionID:  e.AggregateID,
			Window:     e.Window,
			Rule:       e.Rule,
			reason:     e.Reason,
			Elapsed:    secondsDuration(e.MeasureSeconds),
			Budget:     secondsDuration(e.LimitSeconds),
			FiredAt:    e.FiredAt,
			DecisionID: e.DecidedByDecisionID,
		}
		if e.Recoverable != nil {
			v.Recoverable = *e.Recoverable
		}
		if r, ok := ruleByName[e.Rule]; ok {
			v.reason = r.Reason() // a log of an older version may name it otherwise
		}
		return v
	}
	if e.Reason != "" && e.Reason != StopCompleted {
		return fmt.Errorf("%w (stop_reason_code %s)", ErrSessionStopped, e.Reason)
	}
	return ErrSessionStopped
}
