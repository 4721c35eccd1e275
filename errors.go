package watchdog

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; the verdict that fired a session
// is a *VerdictError, read with errors.As.
var (
	// ErrWallClockExceeded is the cause of a session context cancelled
	// because its window outran its wall-clock budget.
	ErrWallClockExceeded = errors.New("watchdog: wall-clock budget exceeded")
	// ErrIdleExceeded is the cause of a session context cancelled by the
	// idle rule: stdout silent past the idle window with no fresher
	// evidence on any other channel.
	ErrIdleExceeded = errors.New("watchdog: idle window exceeded")
	// ErrSessionCeilingExceeded is the cause of a session context
	// cancelled because the session outran Policy.SessionCeiling.
	ErrSessionCeilingExceeded = errors.New("watchdog: session ceiling exceeded")
	// ErrChildrenWaitExceeded is the cause of a session context cancelled
	// because the window waited on children past Policy.ChildrenWaitCeiling.
	ErrChildrenWaitExceeded = errors.New("watchdog: children wait ceiling exceeded")
	// ErrDeadlineExceeded is the cause of a deadline layer's context, and
	// the error Within and Call return, when the layer (a handler, an
	// iteration, a phase: VerdictError.Layer says which) outran its
	// budget. It is distinct from the session-level verdicts.
	ErrDeadlineExceeded = errors.New("watchdog: deadline exceeded")
	// ErrLivenessFailed is the cause of a session context cancelled by a
	// liveness rule of your own (Session.ReportLiveness).
	ErrLivenessFailed = errors.New("watchdog: liveness rule failed")
	// ErrRecoveryBudgetExceeded is wrapped by RunPhase's error when the
	// retries of a phase ran out.
	ErrRecoveryBudgetExceeded = errors.New("watchdog: recovery budget exceeded")
	// ErrSessionStopped is the cause of a session context cancelled because
	// the session was stopped (Stop, or Run's function returned).
	ErrSessionStopped = errors.New("watchdog: session stopped")
	// ErrSupervisorLost is the cause of a Follow context whose window passed
	// its recorded deadline, plus FollowGrace, with no terminal event: no
	// supervisor is deciding the session any more.
	ErrSupervisorLost = errors.New("watchdog: supervisor lost")
	// ErrClosed is returned by calls on a closed Watchdog, and is the cause
	// of every session context that Close cancelled.
	ErrClosed = errors.New("watchdog: closed")
	// ErrAlreadyWatched is returned by Start and Resume for a session id the
	// Watchdog is already watching, and, with a store that arbitrates (see
	// Arbiter), for a window that another Watchdog opened first.
	ErrAlreadyWatched = errors.New("watchdog: session already watched")
	// ErrUnknownSession is returned by Resume for a session id the store has
	// no event for.
	ErrUnknownSession = errors.New("watchdog: unknown session")
	// ErrInvalidPolicy wraps every Policy validation error.
	ErrInvalidPolicy = errors.New("watchdog: invalid policy")
	// ErrInvalidArgument wraps every other bad-input error (an empty session
	// id, a zero start time, a nil context or function).
	ErrInvalidArgument = errors.New("watchdog: invalid argument")
	// ErrAlreadyDecided is returned by an EventStore's Append for a terminal
	// event whose session window already has one: another Watchdog (or
	// process) decided first. The Watchdog that gets it does not record or
	// act twice.
	ErrAlreadyDecided = errors.New("watchdog: window already decided")
	// ErrInvalidEvent is returned by an EventStore's Append for an event it
	// can never record (an empty id, aggregate or kind, a window below 1).
	ErrInvalidEvent = errors.New("watchdog: invalid event")
	// ErrNotRecorded is wrapped by Close's error when events could not be
	// recorded before Close gave up; the error names each of them.
	ErrNotRecorded = errors.New("watchdog: events not recorded")
)

// VerdictError is the one typed error of the package: the verdict that ended
// a session window, the context.Cause of the session's context (maybe as a
// smaller error that errors.As reads as a *VerdictError: read it with
// errors.As, not a type assertion). errors.Is matches it to the sentinel of
// its rule (ErrWallClockExceeded, ErrIdleExceeded, ErrSessionCeilingExceeded,
// ErrChildrenWaitExceeded, ErrLivenessFailed, ErrDeadlineExceeded).
type VerdictError struct {
	SessionID string
	Window    int
	// Rule is the name of the rule that fired ("wall_clock", "idle", a
	// liveness rule of the policy, "handler_deadline", ...; see the table
	// of rules in the package documentation).
	Rule string
	// Elapsed is the rule's measure when it fired: the window's age for
	// the wall clock, the session's age for its ceiling, the cumulative
	// child wait, or stdout's silence for the idle rule.
	Elapsed time.Duration
	// Budget is the rule's limit: the wall-clock budget, the ceiling or
	// the idle window.
	Budget time.Duration
	// FiredAt is the instant of the fire: the Clock's wall-clock reading.
	FiredAt time.Time
	// Recoverable reports whether a recovery layer may retry: true for the
	// idle rule only.
	Recoverable bool
	// DecisionID is the event_id of the decision event, whose evidence
	// summary says what every channel had seen.
	DecisionID string
	// Layer, Name and DyingSpan are set for a deadline layer's overrun:
	// the layer that fired, its name (the handler's, for example) and the
	// step that was running (see Step).
	Layer     Layer
	Name      string
	DyingSpan string

	reason string // the event's reason (see StopReasonCode)
}

// Error implements error.
func (e *VerdictError) Error() string {
	if e.Layer != "" {
		msg := fmt.Sprintf("watchdog: %s %q: %s: elapsed %v, budget %v", e.Layer, e.Name, e.reason, e.Elapsed, e.Budget)
		if e.DyingSpan != "" {
			msg += fmt.Sprintf(" (dying span %q)", e.DyingSpan)
		}
		return msg
	}
	if e.reason == reasonLivenessFailed {
		return fmt.Sprintf("watchdog: session %q window %d: liveness rule %q failed", e.SessionID, e.Window, e.Rule)
	}
	return fmt.Sprintf("watchdog: session %q window %d: %s: elapsed %v > budget %v",
		e.SessionID, e.Window, e.reason, e.Elapsed, e.Budget)
}

// Unwrap returns the sentinel of the verdict's rule.
func (e *VerdictError) Unwrap() error { return ruleSentinel(e.Rule, e.reason) }

// StopReasonCode returns the result envelope's code for the verdict:
// "watchdog_" followed by the reason, or for a deadline layer the reason.
func (e *VerdictError) StopReasonCode() string {
	if e.Layer != "" {
		return e.reason
	}
	return "watchdog_" + e.reason
}

// Resumable reports whether Resume can continue after this verdict: every
// verdict but the session ceiling's, which counts from the session's start.
func (e *VerdictError) Resumable() bool { return e.Rule != ruleSessionCeiling }
