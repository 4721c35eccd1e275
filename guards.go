package watchdog

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sessionwatchdog/watchdog/internal/names"
)

// Checks at the edges: what the Watchdog refuses from outside, and how it
// protects itself from a store that is slow, down or panics.

// validateStart checks Start's and Resume's arguments.
func validateStart(ctx context.Context, id string, p Policy) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := checkName("session id", id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return p.Validate()
}

// The checks of ids, names and free text (see internal/names).
var (
	checkName  = names.Check
	checkText  = names.CheckText
	quoteShort = names.Quote
	cleanText  = names.Clean
)

// checkExtra reports an Extra key that every reader could not keep apart
// from a field of the contract (JSON decoders such as Go's match keys
// without regard to case) or that is not valid UTF-8.
func checkExtra(extra map[string]json.RawMessage) error {
	for k, v := range extra {
		if err := checkText("extra field", k); err != nil {
			return err
		}
		if !utf8.Valid(v) {
			return fmt.Errorf("extra field %s: the value is not valid UTF-8 (JSON decoding would replace its bytes, so the event would not read back as written)", quoteShort(k))
		}
		if known := eventKeyLike(k); known != "" {
			return fmt.Errorf("extra field %s collides with the field %q (keys are told apart without regard to case)", quoteShort(k), known)
		}
	}
	return nil
}

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

// loadEvents calls the store's Load, turning a panic into an error, and
// puts the events in append order (inAppendOrder).
func (w *Watchdog) loadEvents(ctx context.Context, id string) (evs []Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.faults.n.Add(1) // Resume's error says it
			err = fmt.Errorf("store Load panicked: %v", p)
		}
	}()
	evs, err = w.store.Load(ctx, id)
	return inAppendOrder(evs), err
}

// inAppendOrder returns a store's events in append order by their Seq (when
// the store assigned every one, as it must): the store's own order is not
// trusted. The store's slice is left alone.
func inAppendOrder(evs []Event) []Event {
	bySeq := func(a, b Event) int { return cmp.Compare(a.Seq, b.Seq) }
	if !slices.IsSortedFunc(evs, bySeq) && !slices.ContainsFunc(evs, func(e Event) bool { return e.Seq == 0 }) {
		evs = slices.Clone(evs)
		slices.SortStableFunc(evs, bySeq)
	}
	return evs
}

// coalescible reports whether en is a CONTINUE record that a later one of
// its session may replace while the recorder's queue is full.
func coalescible(en *entry) bool { return en.fire == nil && en.ev.Kind == KindVerdict }
