// Package decide is the watchdog's pure decision: a verdict is a function of
// the limits, a snapshot of one session and an explicit instant. It reads no
// clock, takes no lock and does no I/O, so tests, replay and audits can call it
// with fixed instants and get the same answer every time.
package decide

import "time"

// Action is what a verdict asks the watchdog to do.
type Action uint8

const (
	// Continue leaves the session running until Verdict.Next.
	Continue Action = iota
	// Cancel ends the session's window.
	Cancel
)

// ReasonWallClockExceeded is the reason of a verdict whose window outran its
// wall-clock budget.
const ReasonWallClockExceeded = "wall_clock_exceeded"

// Limits are the resolved (defaults applied, validated) limits of a session.
type Limits struct {
	WallClock time.Duration
}

// Snapshot is what the decision needs to know about a session.
type Snapshot struct {
	// WindowStartedAt is when the current window began: the session's start
	// for window 1, the resume moment for a window opened after a terminal
	// event.
	WindowStartedAt time.Time
}

// Verdict is the outcome of Decide.
type Verdict struct {
	Action  Action
	Reason  string        // set when Action is Cancel
	Elapsed time.Duration // now minus the window start
	Budget  time.Duration // the wall-clock budget in force
	// Next is the earliest instant at which the verdict can change: the
	// first nanosecond at which Elapsed exceeds Budget. Zero for Cancel.
	Next time.Time
}

// Decide returns the verdict for session s under limits l at instant now.
// The session fires when now - s.WindowStartedAt > l.WallClock (strictly).
func Decide(l Limits, s Snapshot, now time.Time) Verdict {
	v := Verdict{Elapsed: now.Sub(s.WindowStartedAt), Budget: l.WallClock}
	if v.Elapsed > l.WallClock {
		v.Action = Cancel
		v.Reason = ReasonWallClockExceeded
		return v
	}
	v.Next = s.WindowStartedAt.Add(l.WallClock).Add(time.Nanosecond)
	return v
}
