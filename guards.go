package watchdog

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Checks at the edges: what the Watchdog refuses from outside (names and
// text no store can keep, a store's values, a start it cannot time) and how
// it protects itself from a store that is slow, down or panics.

// maxNameLen is the longest session id, event id, channel, rule, phase or
// handler name, in bytes, that the Watchdog and its stores accept: every
// bundled store keeps it (PostgreSQL's index holds about 2.7 kB).
const maxNameLen = 1024

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

// checkName reports what makes s unusable as an id or a name (what says
// which): empty, longer than maxNameLen bytes, not valid UTF-8, or holding
// a NUL byte, none of which every store can keep. The caller wraps it in
// its sentinel.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > maxNameLen:
		return fmt.Errorf("%s %s is %d bytes long, at most %d", what, quoteShort(s), len(s), maxNameLen)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %s holds a NUL byte", what, quoteShort(s))
	}
	return checkText(what, s)
}

// checkText reports free text (a reason, an error) that JSON cannot carry
// unchanged: invalid UTF-8, which encoding turns into U+FFFD. (A NUL is
// fine: JSON escapes it, and the bundled stores keep an event's JSON as
// JSON text.)
func checkText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s %s is not valid UTF-8", what, quoteShort(s))
	}
	return nil
}

// quoteShort quotes s for an error message, cut after 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// maxTextLen is where cleanText cuts free text.
const maxTextLen = 4096

// cleanText makes free text from user code (an action's error, a step's
// name, a program's name) storable: invalid UTF-8 becomes U+FFFD, and text
// longer than maxTextLen bytes is cut there, ending in "...".
func cleanText(s string) string {
	if len(s) <= maxTextLen && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxTextLen {
		cut := maxTextLen - 3
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

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
