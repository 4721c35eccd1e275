// Package watchdog keeps long-running AI-agent sessions and pipeline loops
// from stalling silently: a session never stops, and never runs past its
// budget, without a recorded reason.
//
// # The shape
//
// One Watchdog supervises many sessions with a single scheduler goroutine
// over a deadline heap; a watched session costs a few hundred bytes and no
// CPU until something is due. When a session's window outruns its wall-clock
// budget (Policy.WallClock, default four hours) the Watchdog
//
//  1. decides, with a pure function of (policy, session snapshot, now);
//  2. cancels the session's context with a *VerdictError cause, so
//     errors.Is(context.Cause(ctx), ErrWallClockExceeded) holds;
//  3. records exactly one runtime.watchdog.cancel Event through the
//     EventStore, on its own goroutine, retrying with backoff if the store
//     fails: a slow or failing store delays the record, never the cancel.
//
// Start begins a session, Stop ends it normally, Run wraps a pipeline loop
// and returns a Result envelope, and Resume re-attaches a session after a
// restart by reading session_started_at back from the store; a resume after a
// cancel opens a fresh window. Follow lets another component exit when the
// session is cancelled (cooperative cancellation through the store).
//
// # Exactly one terminal event per window
//
// Within one Watchdog, a window ends once: by Stop, by the fire, or by Close
// (which records nothing, so the session can be resumed). Across Watchdogs
// and processes the EventStore arbitrates: it refuses a second terminal
// event for the same session window with ErrAlreadyDecided, and the losing
// Watchdog records nothing more. Its own copy of the session is still
// cancelled, because the window is over everywhere.
//
// # Testing
//
// Inject a *clock.Mock with WithClock and move time with watchdogtest.Advance
// (or Mock.Add followed by Watchdog.Check, the settle point). The real clock
// also works unchanged inside a testing/synctest bubble.
package watchdog
