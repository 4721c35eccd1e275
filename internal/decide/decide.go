// Package decide is the watchdog's pure decision: a verdict is a function of
// the limits, a snapshot of one session and an explicit instant. It reads no
// clock, takes no lock and does no I/O, so tests, replay and audits can call it
// with fixed instants and get the same answer every time.
package decide

import (
	"math"
	"time"
)

// Rule names one rule of the watchdog. The absolute rules (wall clock and the
// ceilings) act as soon as they are exceeded; the idle rule waits for its
// settle window and can be deferred by evidence.
type Rule uint8

// The rules, in the order they are checked.
const (
	RuleSessionCeiling Rule = iota
	RuleChildrenWait
	RuleWallClock
	RuleIdle
	NumRules
)

// RuleSet is a set of rules.
type RuleSet uint8

// Has reports whether r is in the set.
func (s RuleSet) Has(r Rule) bool { return s&(1<<r) != 0 }

// With returns the set plus r.
func (s RuleSet) With(r Rule) RuleSet { return s | 1<<r }

// Without returns the set minus r.
func (s RuleSet) Without(r Rule) RuleSet { return s &^ (1 << r) }

// Reasons, recorded on decision and cancel events.
const (
	ReasonSessionCeiling = "session_ceiling_exceeded"
	ReasonChildrenWait   = "children_wait_exceeded"
	ReasonWallClock      = "wall_clock_exceeded"
	ReasonNoOutput       = "idle_exceeded"
)

// Reason returns the reason string of r.
func (r Rule) Reason() string {
	switch r {
	case RuleSessionCeiling:
		return ReasonSessionCeiling
	case RuleChildrenWait:
		return ReasonChildrenWait
	case RuleWallClock:
		return ReasonWallClock
	case RuleIdle:
		return ReasonNoOutput
	}
	return "unknown"
}

// Recoverable reports whether a recovery layer may retry after r fired: only
// the idle rule is; the wall clock and the ceilings are never retried.
func (r Rule) Recoverable() bool { return r == RuleIdle }

// Action is what a verdict asks the watchdog to do.
type Action uint8

const (
	// Continue leaves the session running until Verdict.Next.
	Continue Action = iota
	// Act ends the session's window: the rule fired in act mode.
	Act
	// Advise records the decision of a rule in shadow mode and does
	// nothing else; the caller adds the rule to State.Advised and decides
	// again.
	Advise
)

// Limits are the resolved (defaults applied, validated) limits of a session.
// A zero duration turns its rule off, except WallClock, which is always on.
type Limits struct {
	WallClock        time.Duration
	SessionCeiling   time.Duration
	ChildWaitCeiling time.Duration
	IdleWindow       time.Duration
	EvidenceTTL      time.Duration // 0: no deferral (stdout only)
	StartupGrace     time.Duration
	MaxIdleDeferral  time.Duration // 0: no cap
	SettleChecks     int           // >= 1
	SettleInterval   time.Duration // > 0
	Shadow           RuleSet       // rules in shadow (advise) mode
}

// Never marks a channel that has recorded no evidence.
const Never int64 = -1 << 63

// Channel is the evidence of one channel. Channel 0 is the baseline (stdout).
type Channel struct {
	Last  int64 // Unix nanoseconds of the latest evidence, or Never
	Count uint64
}

// State is the rules' memory between two decisions. The caller stores the
// verdict's State and passes it back in the next Snapshot.
type State struct {
	// StaleChecks counts consecutive stale observations of the idle rule.
	StaleChecks int
	// SettleDueAt is when the next stale observation may be counted.
	SettleDueAt time.Time
	// Advised holds the rules whose shadow decision is already recorded:
	// the absolute rules for the rest of the window, the idle rule until a
	// fresh observation.
	Advised RuleSet
}

// Snapshot is what the decision needs to know about a session.
type Snapshot struct {
	SessionStartedAt time.Time
	WindowStartedAt  time.Time
	// ObservedSince is the idle floor: evidence before it does not count
	// (the Start or Resume that attached the window, the end of a wait, a
	// new RunPhase attempt). Zero means WindowStartedAt.
	ObservedSince time.Time
	// BudgetFrom is when the wall-clock budget counts from: later than
	// WindowStartedAt by the unsupervised time of a window whose budget
	// counts supervised time only. Zero means WindowStartedAt.
	BudgetFrom time.Time
	// GraceUntil is when the startup grace ends: the idle rule is not
	// armed before it unless the baseline speaks. Zero once the baseline
	// has spoken in this window, or without a grace.
	GraceUntil time.Time
	Channels   []Channel
	// ChildWait is the time spent waiting on children in closed waits;
	// ChildWaitOpenSince is when the current wait began (zero if none).
	ChildWait          time.Duration
	ChildWaitOpenSince time.Time
	// BoundedWork counts in-flight handlers with a deadline; the idle rule
	// waits for them (their own deadlines end them). BoundedUntil is the
	// earliest instant by which one of them is over (deadline + grace).
	BoundedWork  int
	BoundedUntil time.Time
	// Waiting: the session waits for external events; the idle rule is
	// suspended (the waiting watchdog handles it).
	Waiting bool
	State   State
}

// Verdict is the outcome of Decide.
type Verdict struct {
	Action Action
	// Rule is the rule that acted or advised; for a recorded Continue, the
	// idle rule.
	Rule Rule
	// Record reports whether the verdict is worth an event: every Act and
	// Advise, and the idle rule's deferred and settling Continues. A plain
	// "nothing is due" Continue is not recorded.
	Record bool
	// Deferred: the baseline is silent past the idle window but fresher
	// evidence on ActiveChannel justified waiting.
	Deferred bool
	// ActiveChannel is the channel that justified waiting, -1 for none,
	// ActiveHandler for bounded work in flight, ActiveWaiting for the
	// waiting state.
	ActiveChannel int
	// Elapsed and Budget describe the rule's measure: for the wall clock,
	// the window's age and budget; for the session ceiling, the session's
	// age and ceiling; for the children wait, the cumulative wait and
	// ceiling; for the idle rule, the baseline's silence and the idle
	// window.
	Elapsed time.Duration
	Budget  time.Duration
	// Next is the earliest instant at which the verdict can change. Zero
	// for Act.
	Next time.Time
	// State is the rules' memory after this decision.
	State State
}

// ActiveChannel values that are not channels.
const (
	ActiveHandler = -2
	ActiveWaiting = -3
)

func after(t time.Time, d time.Duration) time.Time { return t.Add(d).Add(time.Nanosecond) }

// satAdd is a + b for non-negative durations, saturating.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Decide returns the verdict for session s under limits l at instant now.
// Absolute rules fire when their measure exceeds their limit (strictly),
// before any deferral is considered. The idle rule fires after
// l.SettleChecks consecutive stale observations spaced by l.SettleInterval;
// the baseline is stale when it has been silent for more than l.IdleWindow
// since its last evidence (or since the startup grace ended, if it never
// had any), unless a non-baseline channel's evidence is at most
// l.EvidenceTTL old and the idle episode has not been deferred for more than
// l.MaxIdleDeferral.
func Decide(l Limits, s Snapshot, now time.Time) Verdict {
	v := Verdict{ActiveChannel: -1, State: s.State}
	if s.WindowStartedAt.IsZero() || s.SessionStartedAt.IsZero() {
		return v // never act on missing data
	}
	act := func(r Rule, elapsed, budget time.Duration) Verdict {
		v.Rule, v.Elapsed, v.Budget, v.Record = r, elapsed, budget, true
		if l.Shadow.Has(r) {
			v.Action = Advise
		} else {
			v.Action = Act
		}
		v.Next = time.Time{}
		return v
	}

	// Absolute rules: no evidence extends them. Each is exceeded at the
	// instant it is next looked at (Next), compared as instants: a
	// measure longer than a Duration holds (a start 300 years ago)
	// saturates now.Sub, which would never exceed the longest budget
	// while its instant came round again and again.
	if l.SessionCeiling > 0 && !s.State.Advised.Has(RuleSessionCeiling) {
		due := after(s.SessionStartedAt, l.SessionCeiling)
		if !now.Before(due) {
			return act(RuleSessionCeiling, now.Sub(s.SessionStartedAt), l.SessionCeiling)
		}
		v.Next = earliest(v.Next, due)
	}
	if l.ChildWaitCeiling > 0 && !s.State.Advised.Has(RuleChildrenWait) {
		wait, open := s.ChildWait, s.ChildWaitOpenSince
		if !open.IsZero() {
			wait = satAdd(wait, max(now.Sub(open), 0))
		}
		// The closed waits alone exceed the ceiling, or the open one
		// makes them exceed it after(open, what is left).
		due := time.Time{}
		if !open.IsZero() && s.ChildWait <= l.ChildWaitCeiling {
			due = after(open, l.ChildWaitCeiling-s.ChildWait)
		}
		if s.ChildWait > l.ChildWaitCeiling || !due.IsZero() && !now.Before(due) {
			return act(RuleChildrenWait, wait, l.ChildWaitCeiling)
		}
		v.Next = earliest(v.Next, due)
	}
	if !s.State.Advised.Has(RuleWallClock) {
		from := s.WindowStartedAt
		if s.BudgetFrom.After(from) {
			from = s.BudgetFrom
		}
		due := after(from, l.WallClock)
		if !now.Before(due) {
			return act(RuleWallClock, now.Sub(from), l.WallClock)
		}
		v.Next = earliest(v.Next, due)
	}
	if l.IdleWindow <= 0 || len(s.Channels) == 0 || s.Waiting {
		return v
	}

	// The idle rule.
	base := s.Channels[0]
	observed := s.ObservedSince
	if observed.IsZero() {
		observed = s.WindowStartedAt
	}
	spoke := base.Last != Never && base.Last >= observed.UnixNano()
	ref := observed
	if spoke {
		ref = time.Unix(0, base.Last)
	} else if s.GraceUntil.After(ref) {
		ref = s.GraceUntil
	}
	idleDue := ref.Add(l.IdleWindow) // silent for more than the window after this
	fresh := func() Verdict {
		v.State.StaleChecks, v.State.SettleDueAt = 0, time.Time{}
		v.State.Advised = v.State.Advised.Without(RuleIdle)
		return v
	}
	if !now.After(idleDue) {
		next := idleDue.Add(time.Nanosecond)
		if !spoke && now.Before(ref) {
			// In the startup grace with no output yet: a first line at
			// any later instant t arms the rule at once, stale after
			// t+IdleWindow > now+IdleWindow, so look again then.
			next = earliest(next, now.Add(l.IdleWindow).Add(time.Nanosecond))
		}
		v.Next = earliest(v.Next, next)
		return fresh()
	}
	silence := now.Sub(ref)
	if l.EvidenceTTL > 0 {
		capped := l.MaxIdleDeferral > 0 && !now.Before(after(idleDue, l.MaxIdleDeferral))
		best, bestLast := -1, Never
		for i, c := range s.Channels[1:] {
			if c.Last != Never && c.Last > bestLast {
				best, bestLast = i+1, c.Last
			}
		}
		if best > 0 && !capped && now.Before(after(time.Unix(0, bestLast), l.EvidenceTTL)) {
			v.Deferred, v.ActiveChannel, v.Record, v.Rule = true, best, true, RuleIdle
			v.Elapsed, v.Budget = silence, l.IdleWindow
			v.Next = earliest(v.Next, after(time.Unix(0, bestLast), l.EvidenceTTL))
			if l.MaxIdleDeferral > 0 {
				v.Next = earliest(v.Next, after(idleDue, l.MaxIdleDeferral))
			}
			return fresh()
		}
	}
	if s.BoundedWork > 0 {
		// A handler with a deadline is in flight: bounded work, which
		// its own deadline will end. Look again when it must be over.
		v.Deferred, v.ActiveChannel, v.Record, v.Rule = true, ActiveHandler, true, RuleIdle
		v.Elapsed, v.Budget = silence, l.IdleWindow
		until := s.BoundedUntil
		if until.Before(now) {
			until = now // the handler is overdue for its end: look right after
		}
		v.Next = earliest(v.Next, until.Add(time.Nanosecond))
		return fresh()
	}
	if s.State.Advised.Has(RuleIdle) {
		// Already advised for this idle episode: look again one idle
		// window later to notice the end of the episode.
		v.Next = earliest(v.Next, now.Add(l.IdleWindow))
		return v
	}
	// A stale observation. Count it only at its settle instant, so that an
	// earlier look (another rule's deadline) never shortens the window.
	if !s.State.SettleDueAt.IsZero() && now.Before(s.State.SettleDueAt) {
		v.Next = earliest(v.Next, s.State.SettleDueAt)
		return v
	}
	v.State.StaleChecks = s.State.StaleChecks + 1
	if v.State.StaleChecks >= l.SettleChecks {
		v.State.SettleDueAt = time.Time{}
		v.State.StaleChecks = 0
		return act(RuleIdle, silence, l.IdleWindow)
	}
	v.State.SettleDueAt = now.Add(l.SettleInterval)
	v.Rule, v.Record, v.Elapsed, v.Budget = RuleIdle, true, silence, l.IdleWindow
	v.Next = earliest(v.Next, v.State.SettleDueAt)
	return v
}

// LivenessState is the settle memory of one liveness rule of the user's.
type LivenessState struct {
	// Stale counts consecutive stale observations.
	Stale int
	// DueAt is when the next stale observation may be counted.
	DueAt time.Time
	// Advised: the rule's shadow decision is recorded for this episode.
	Advised bool
}

// LivenessVerdict is the outcome of Liveness.
type LivenessVerdict struct {
	// Action is Continue, Act or Advise.
	Action Action
	// Record: a Continue that counted a stale observation inside the
	// settle window (State.Stale of the settle checks).
	Record bool
	// Stale is the count of consecutive stale observations that decided
	// (Act, Advise) or was recorded (Record).
	Stale int
	State LivenessState
}

// Liveness decides one observation of a liveness rule of the user's at now,
// with the settle discipline of the idle rule: it acts (or advises, in
// shadow mode) after checks consecutive stale observations, counted at most
// once per interval; one fresh observation resets the count. busy means an
// action on the session is pending: nothing is counted.
func Liveness(st LivenessState, stale bool, now time.Time, checks int, interval time.Duration, shadow, busy bool) LivenessVerdict {
	v := LivenessVerdict{State: st}
	switch {
	case !stale:
		v.State = LivenessState{}
		return v
	case st.Advised || busy || (!st.DueAt.IsZero() && now.Before(st.DueAt)):
		return v // advised for this episode, being acted on, or too early to count
	}
	v.State.Stale++
	v.State.DueAt = now.Add(interval)
	v.Stale = v.State.Stale
	switch {
	case v.State.Stale < checks:
		v.Record = true
	case shadow:
		v.Action = Advise
		v.State.Advised = true
	default:
		v.Action = Act
		v.State = LivenessState{}
	}
	return v
}

// Expired reports whether a deadline of budget, running from start, has
// come at now: a deadline layer fires and a waiting watchdog times out at
// exactly start + budget.
func Expired(start time.Time, budget time.Duration, now time.Time) bool {
	return !now.Before(start.Add(budget))
}

// Retry decides what follows a recoverable failure of a RunPhase attempt,
// after retries retries already made, under a recovery budget of budget
// retries and a first backoff of backoff: retry after wait (the backoff
// doubling with each retry), or give up (the budget is spent).
func Retry(retries, budget int, backoff time.Duration) (retry bool, wait time.Duration) {
	if retries >= budget {
		return false, 0
	}
	return true, backoff << min(retries, 20)
}

// ResumeWindow decides the window a resume attaches to, given the last
// recorded window (0: none) and whether it has a terminal event: the same
// window, keeping its start, or (fresh) the next one, starting at the
// resume.
func ResumeWindow(last int, ended bool) (window int, fresh bool) {
	if ended || last == 0 {
		return last + 1, true
	}
	return last, false
}

// CallLimit is what a bounded call's limits say at an instant (see Call.Hit).
type CallLimit int

// The limits a call can hit.
const (
	CallWithin CallLimit = iota // no limit has come
	CallCap                     // the cap, from the call's start
	CallIdle                    // the idle limit, from the last progress (or the first-progress limit from the start)
)

// Call is a bounded call's limits and progress: the one call-limit rule,
// which the deadline layer applies live and Replay re-derives from a record.
type Call struct {
	Start time.Time     // when the call began
	Cap   time.Duration // the longest it may run from Start; nothing extends it
	Idle  time.Duration // the longest without progress after the first; 0: none
	First time.Duration // the longest from Start before the first progress; 0: none
	// ProgressAt is when progress last advanced; zero: never.
	ProgressAt time.Time
}

// IdleRef is the instant the idle limit that applies runs from: the last
// progress, or Start before any.
func (c Call) IdleRef() time.Time {
	if c.ProgressAt.IsZero() {
		return c.Start
	}
	return c.ProgressAt
}

// IdleLimit is the idle limit that applies: First before the first
// progress, Idle after it (0: none).
func (c Call) IdleLimit() time.Duration {
	if c.ProgressAt.IsZero() {
		return c.First
	}
	return c.Idle
}

// Hit reports the limit c has hit at now, the cap first (each fires at
// exactly its instant, see Expired); with none hit, it returns CallWithin
// and the next instant to look again: the earlier of the cap's and the
// idle limit's due instants.
func (c Call) Hit(now time.Time) (CallLimit, time.Time) {
	if Expired(c.Start, c.Cap, now) {
		return CallCap, time.Time{}
	}
	next := c.Start.Add(c.Cap)
	if idle := c.IdleLimit(); idle > 0 {
		ref := c.IdleRef()
		if Expired(ref, idle, now) {
			return CallIdle, time.Time{}
		}
		if d := ref.Add(idle); d.Before(next) {
			next = d
		}
	}
	return CallWithin, next
}

// EarliestStop returns the earliest instant, at or after now, at which
// Decide acts on s under l if nothing more happens: no evidence on any
// channel, no call begins, the calls in flight run until they are over
// (s.BoundedUntil must be when the last of them is: its cap plus grace),
// an open child wait stays open, a waiting state goes on. It returns the
// rule that acts then; ok is false when no rule would (every rule that
// could is in shadow mode). A rule in shadow mode never stops a session,
// so it is left out.
func EarliestStop(l Limits, s Snapshot, now time.Time) (at time.Time, rule Rule, ok bool) {
	if l.Shadow.Has(RuleSessionCeiling) {
		l.SessionCeiling = 0
	}
	if l.Shadow.Has(RuleChildrenWait) {
		l.ChildWaitCeiling = 0
	}
	if l.Shadow.Has(RuleIdle) {
		l.IdleWindow = 0
	}
	if l.Shadow.Has(RuleWallClock) {
		s.State.Advised = s.State.Advised.With(RuleWallClock) // always on: mark it advised instead
	}
	// Each step moves to the verdict's Next, which only a rule's own
	// instant, a settle check, an evidence's expiry or the calls' end can
	// be: a few steps per settle check.
	for range 1 << 16 {
		if s.BoundedWork > 0 && !now.Before(s.BoundedUntil) {
			s.BoundedWork = 0 // the last call is over: the session is looked at then
		}
		v := Decide(l, s, now)
		if v.Action == Act {
			return now, v.Rule, true
		}
		next := v.Next
		if s.BoundedWork > 0 && (next.IsZero() || next.After(s.BoundedUntil)) {
			next = s.BoundedUntil
		}
		if next.IsZero() || !next.After(now) {
			return time.Time{}, 0, false
		}
		s.State, now = v.State, next
	}
	return time.Time{}, 0, false
}
