package watchdog

import (
	"context"
	"fmt"
	"time"
)

// Checks at the edges: what the Watchdog refuses from outside (a store's
// values, a start it cannot time) and how it protects itself from a store
// that is slow, down or panics.

// maxQueued bounds the recorder's queue for new sessions: past it Start and
// Resume are refused until the store catches up. The verdicts of sessions
// already watched are still queued (at most one decision and one outcome
// per window), so none is lost.
var maxQueued = 1 << 18

// backPressure refuses a new session while the recorder's queue is full.
func (w *Watchdog) backPressure(id string) error {
	if n := w.rec.Len(); n >= maxQueued {
		return fmt.Errorf("%w: session %q refused: %d events wait for the store (at most %d before new sessions are refused); retry when it catches up", ErrNotRecorded, id, n, maxQueued)
	}
	return nil
}

// representable reports whether t is within the years 1678 to 2262: the
// instants the Watchdog can time (Unix nanoseconds in an int64).
func representable(t time.Time) bool { return !t.Before(minNanos) && !t.After(maxNanos) }

// checkLoaded refuses an event read back from the store that the Watchdog
// cannot continue from: invalid, another session's, or with an instant it
// cannot time.
func checkLoaded(e *Event, id string) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("resume %q: the store returned %w", id, err)
	}
	if e.AggregateID != id {
		return fmt.Errorf("%w: resume %q: the store returned event %s of session %q", ErrInvalidEvent, id, e.ID, e.AggregateID)
	}
	for _, t := range [...]time.Time{e.SessionStartedAt, e.WindowStartedAt} {
		if !t.IsZero() && !representable(t) {
			return fmt.Errorf("%w: resume %q: event %s: instant %v is outside the years 1678 to 2262", ErrInvalidEvent, id, e.ID, t)
		}
	}
	return nil
}

// loadEvents calls the store's Load, turning a panic into an error.
func (w *Watchdog) loadEvents(ctx context.Context, id string) (evs []Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.faults.n.Add(1) // Resume's error says it
			err = fmt.Errorf("store Load panicked: %v", p)
		}
	}()
	return w.store.Load(ctx, id)
}

// coalescible reports whether en is a CONTINUE record that a later one of
// its session may replace while the recorder's queue is full.
func coalescible(en *entry) bool { return en.fire == nil && en.ev.Kind == KindVerdict }
