package watchdog

import (
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/retain"
)

// Retention bounds what a store keeps of ended sessions, so that a
// long-running process's store does not grow without bound. The
// MemoryStore (NewMemoryStoreWithRetention) and the file store
// (file.WithRetention) take one. The zero value keeps every event, the
// stores' default. Each field set applies on its own. A value is safe to
// copy and to share.
//
// A store never forgets an event of a session's open window (its highest
// window, while it has no terminal event), and forgets whole windows,
// oldest first, so that what it keeps still reads as a log: Resume finds
// session_started_at and the last window on the last window's events,
// Replay (sessionwatchdog verify) re-derives the verdicts of every window
// kept (each window's opening event records its policy), and each kept
// window keeps its one terminal event.
//
// Retention is measured on the events, not on a clock of the store's: the
// store's "now" is the latest occurred_at it has recorded (the Watchdog's
// Clock, a mock one included), and it applies the retention when it records
// an event. So an idle store forgets nothing (nor grows), a store that
// rebuilds itself from its log (the file store's Open) forgets exactly what
// the appends forgot, and an event dated far in the future (a wrong clock)
// makes ended sessions expire early, never an open window.
//
// A forgotten event is forgotten whole, event_id included: appended again,
// it is recorded again as a new event (the Watchdog never does that: it
// retries an Append only until it succeeds).
type Retention struct {
	// KeepWindows is how many ended windows of each session the store
	// keeps besides the open one: when a window ends, the windows older
	// than the last KeepWindows ended ones are forgotten. 1 keeps what
	// Resume needs. 0 (the default) keeps every window; a negative value is
	// an error. The store still refuses a terminal event for a forgotten
	// window, as it would a second one (an error wrapping
	// ErrAlreadyDecided); any other (late) event of a forgotten window is
	// accepted and forgotten at once.
	KeepWindows int
	// ForgetAfter is how long a session whose last window has ended stays
	// in the store: once the store records an event that occurred
	// ForgetAfter or more after that window's end (its terminal event's
	// occurred_at), the session's events are all forgotten, and the store
	// answers for it as for a session it never held (Resume returns
	// ErrUnknownSession; a new Start of the id begins at window 1). A
	// session resumed in the meantime is not forgotten. 0 (the default)
	// keeps ended sessions; a negative value is an error.
	ForgetAfter time.Duration
}

// check reports a negative field of r, wrapping ErrInvalidArgument.
func (r Retention) check() error {
	if err := r.policy().Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

func (r Retention) policy() retain.Policy {
	return retain.Policy{Windows: r.KeepWindows, After: r.ForgetAfter}
}
