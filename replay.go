package watchdog

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/seconds"
)

// Mismatch is a recorded verdict that the decision, fed only the inputs
// recorded with it, does not re-derive; or an outcome that links no decision.
type Mismatch struct {
	// Event is the event that does not check out: its Seq, ID,
	// AggregateID and Kind say where it is in the log.
	Event Event
	// Recorded is what the log says; Derived is what the decision says.
	Recorded string
	Derived  string
}

// String describes the mismatch on one line.
func (m Mismatch) String() string {
	return fmt.Sprintf("seq %d event %s (%s, session %q): recorded %s, re-derived %s",
		m.Event.Seq, m.Event.ID, m.Event.Kind, m.Event.AggregateID, m.Recorded, m.Derived)
}

// Replay re-derives every recorded verdict of a log from the recorded events
// alone and returns the ones that do not match, so an audit or a
// deterministic-simulation run can prove the log is self-consistent. events
// is a log in append order (for example a store's Load, or a JSON Lines file
// decoded event by event); sessions may be interleaved.
//
// Each verdict and decision event carries its inputs (the session's and the
// window's start, the instant idleness counts from, the evidence summary,
// the child wait, handlers in flight, the waiting state, the settle count),
// and the policy is recorded on the start and resume events; Replay feeds
// them to the Watchdog's pure decision at the event's occurred_at and
// compares the verdict, rule, active channel, settle count and measure. It
// checks the decision-first chain: every outcome (cancel, superseded,
// action_failed, attempt_cancelled) links an act decision of its session
// and window; a cancel of a session whose policy the log recorded (one the
// Watchdog wrote) links one at all; every act decision is followed by an
// outcome linking it or by the end of its window (a stop, or a cancel that
// overtook it), so a decision whose action never ran, whose outcome was
// lost or that the log ends before is reported. A deadline record that
// carries its call (Event.CallsInFlight) is re-derived as the deadline
// layer decides (see replayCallDeadline): the rule, the measure and the
// limit must match, so a record whose rule, limits or instant were changed
// is reported, naming the rule the limits give. Other deadline records (of
// earlier versions) and wait-timeout events must have fired at or after
// their limit. The error is for a log Replay cannot read (a verdict of a
// session whose policy was never recorded is a Mismatch, not an error).
func Replay(events []Event) ([]Mismatch, error) {
	type key struct {
		id     string
		window int
	}
	policies := map[string]decide.Limits{}
	channels := map[string][]string{}
	advised := map[key]decide.RuleSet{}
	decisions := map[string]Event{}
	open := map[key][]int{} // per window, the act decisions no outcome links yet, by index in events
	linked := map[string]bool{}
	var out []Mismatch
	bad := func(e Event, recorded, derived string) {
		out = append(out, Mismatch{Event: e, Recorded: recorded, Derived: derived})
	}
	for i, e := range events {
		if e.AggregateID == "" || e.Kind == "" {
			return out, fmt.Errorf("%w: replay: event %d (%s) has no aggregate_id or event_kind", ErrInvalidEvent, i, e.ID)
		}
		k := key{e.AggregateID, e.Window}
		switch e.Kind {
		case KindStart, KindResume:
			if e.Policy != nil {
				if err := e.Policy.Validate(); err != nil {
					bad(e, "policy "+err.Error(), "a valid policy")
					continue
				}
				policies[e.AggregateID] = e.Policy.limits()
				channels[e.AggregateID] = e.Policy.Channels
			}
		case KindVerdict, KindDecision:
			l, ok := policies[e.AggregateID]
			if _, builtin := ruleByName[e.Rule]; !builtin {
				// A liveness rule of the user's: its observations are not
				// in the log, but each recorded one is the stale one that
				// made the count what it says.
				if e.Kind == KindDecision {
					decisions[e.ID] = e
					if e.Mode != ModeShadow {
						open[k] = append(open[k], i)
					}
				}
				checks := e.SettleChecks
				if ok {
					checks = l.SettleChecks
				}
				pre := decide.LivenessState{Stale: e.SettleCount - 1}
				v := decide.Liveness(pre, true, e.OccurredAt, checks, l.SettleInterval, e.Mode == ModeShadow, false)
				want := v.Record && e.Kind == KindVerdict || v.Action != decide.Continue && e.Kind == KindDecision
				if !want || v.Stale != e.SettleCount || e.SettleCount < 1 || e.SettleCount > checks {
					bad(e, fmt.Sprintf("%s rule=%s settle=%d/%d", verdictLabel(e.Kind), e.Rule, e.SettleCount, e.SettleChecks),
						fmt.Sprintf("the settle discipline of %d checks", checks))
				}
				continue
			}
			if !ok {
				bad(e, "a verdict", "no policy recorded for the session before it")
				continue
			}
			sn, err := replaySnapshot(e)
			if err != nil {
				bad(e, "evidence "+err.Error(), "readable evidence")
				continue
			}
			sn.State.Advised = advised[k].Without(decide.RuleIdle)
			if e.Kind == KindVerdict && e.SettleCount > 0 {
				sn.State.StaleChecks = e.SettleCount - 1
			}
			if e.Kind == KindDecision && e.Rule == ruleIdle {
				sn.State.StaleChecks = l.SettleChecks - 1
			}
			v := decide.Decide(l, sn, e.OccurredAt)
			got := describe(v, channels[e.AggregateID])
			if e.Kind == KindVerdict {
				want := fmt.Sprintf("CONTINUE rule=%s active=%s settle=%d", e.Rule, e.ActiveChannel, e.SettleCount)
				if got != want {
					bad(e, want, got)
				}
				continue
			}
			decisions[e.ID] = e
			action := "act"
			if e.Mode == ModeShadow {
				action = "shadow"
			} else {
				open[k] = append(open[k], i)
			}
			want := fmt.Sprintf("HARD_STOP %s rule=%s measure=%.9f", action, e.Rule, e.MeasureSeconds)
			if got != want {
				bad(e, want, got)
			}
			if e.Mode == ModeShadow && e.Rule != ruleIdle {
				if r, ok := ruleByName[e.Rule]; ok {
					advised[k] = advised[k].With(r)
				}
			}
		case KindCancel, KindSuperseded, KindActionFailed, KindAttemptCancelled:
			if e.Kind == KindCancel {
				delete(open, k) // the window is over: a decision it outran needs no outcome
			}
			if e.Kind == KindCancel && e.DecidedByDecisionID == "" {
				if _, ours := policies[e.AggregateID]; ours {
					// The Watchdog records every decision before acting.
					bad(e, "a cancel with no decided_by_decision_id", "a cancel linked to its decision")
				}
				continue // a stop-like cancel written by another tool: nothing to check
			}
			linked[e.DecidedByDecisionID] = true
			d, ok := decisions[e.DecidedByDecisionID]
			switch {
			case !ok:
				bad(e, "decided_by_decision_id="+e.DecidedByDecisionID, "no such decision earlier in the log")
			case d.AggregateID != e.AggregateID || d.Window != e.Window || d.Rule != e.Rule:
				bad(e, fmt.Sprintf("session %q window %d rule %s", e.AggregateID, e.Window, e.Rule),
					fmt.Sprintf("decision of session %q window %d rule %s", d.AggregateID, d.Window, d.Rule))
			case d.Mode == ModeShadow:
				bad(e, "an outcome", "a shadow decision, which never acts")
			}
		case KindStop:
			delete(open, k)
		case KindHandlerDeadline, KindWaitTimeout:
			if e.Kind == KindHandlerDeadline && len(e.CallsInFlight) == 1 {
				if recorded, derived, ok := replayCallDeadline(e, e.CallsInFlight[0]); !ok {
					bad(e, recorded, derived)
				}
				continue
			}
			if !decide.Expired(time.Time{}, secondsDuration(e.LimitSeconds), time.Time{}.Add(secondsDuration(e.MeasureSeconds))) {
				bad(e, fmt.Sprintf("fired after %.9fs", e.MeasureSeconds), fmt.Sprintf("not due before %.9fs", e.LimitSeconds))
			}
			if e.Rule == "handler_idle" && !e.ProgressAt.IsZero() &&
				!decide.Expired(e.ProgressAt, secondsDuration(e.LimitSeconds), e.OccurredAt) {
				bad(e, fmt.Sprintf("fired %v after the last progress", e.OccurredAt.Sub(e.ProgressAt)),
					fmt.Sprintf("not due before %.9fs without progress", e.LimitSeconds))
			}
		}
	}
	// The act decisions with neither an outcome nor the end of their window.
	var unlinked []int
	for _, idx := range open {
		for _, i := range idx {
			if !linked[events[i].ID] {
				unlinked = append(unlinked, i)
			}
		}
	}
	slices.Sort(unlinked)
	for _, i := range unlinked {
		bad(events[i], "an act decision", "an outcome linking it, or the end of its window (none recorded)")
	}
	return out, nil
}

// replaySnapshot rebuilds the decision's input from a verdict event.
func replaySnapshot(e Event) (decide.Snapshot, error) {
	chs := make([]decide.Channel, len(e.EvidenceSummary))
	for i, x := range e.EvidenceSummary {
		chs[i] = decide.Channel{Last: decide.Never, Count: x.Counter}
		if x.LastAt != nil {
			chs[i].Last = x.LastAt.UnixNano()
		}
	}
	if math.IsNaN(e.ChildrenWaitSeconds) || e.ChildrenWaitSeconds < 0 {
		return decide.Snapshot{}, fmt.Errorf("children_wait_seconds %v", e.ChildrenWaitSeconds)
	}
	return decide.Snapshot{
		SessionStartedAt: e.SessionStartedAt,
		WindowStartedAt:  e.WindowStartedAt,
		ObservedSince:    e.ObservedSince,
		GraceUntil:       e.GraceUntil,
		BudgetFrom:       e.BudgetFrom,
		Channels:         chs,
		ChildWait:        secondsDuration(e.ChildrenWaitSeconds),
		BoundedWork:      e.HandlersInFlight,
		BoundedUntil:     e.OccurredAt.Add(time.Nanosecond),
		Waiting:          e.Waiting,
	}, nil
}

// describe renders a verdict the way Replay compares it.
func describe(v decide.Verdict, extra []string) string {
	switch v.Action {
	case decide.Act, decide.Advise:
		action := "act"
		if v.Action == decide.Advise {
			action = "shadow"
		}
		return fmt.Sprintf("HARD_STOP %s rule=%s measure=%.9f", action, ruleNames[v.Rule], v.Elapsed.Seconds())
	}
	if !v.Record {
		return "CONTINUE (nothing due)"
	}
	s := &Session{cfg: &sessionConfig{policy: Policy{Channels: extra}}}
	settle := 0
	if !v.Deferred {
		settle = v.State.StaleChecks
	}
	return fmt.Sprintf("CONTINUE rule=%s active=%s settle=%d", ruleNames[v.Rule], activeName(s, v.ActiveChannel), settle)
}

// replayCallDeadline re-derives the deadline record e from the call c it
// carries, at the record's instant, by the deadline layer's rule
// (decide.Call): the cap from the start first; then the idle limit from the
// last progress, or before any the first-progress limit
// (FirstProgressSeconds, else IdleSeconds) from the start. It returns the
// record and the re-derivation as Replay compares them, and whether they
// match. The instants are recorded to the nanosecond (the progress instant
// is the verdict's own reading); the limits, as float64 seconds, only under
// 2^51 ns (26 days): above, limits limitSlack shorter and longer match too.
func replayCallDeadline(e Event, c CallInFlight) (recorded, derived string, ok bool) {
	recorded = fmt.Sprintf("handler %q layer %s rule=%s measure=%.9f limit=%.9f %s", e.Handler, e.Layer, e.Rule,
		e.MeasureSeconds, e.LimitSeconds, progressText(e.ProgressValue, e.ProgressAt))
	for _, f := range []float64{c.BudgetSeconds, c.IdleSeconds, c.FirstProgressSeconds} {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || c.BudgetSeconds == 0 {
			return recorded, fmt.Sprintf("a call with valid limits, not cap %v idle %v first progress %v",
				c.BudgetSeconds, c.IdleSeconds, c.FirstProgressSeconds), false
		}
	}
	if !c.ProgressAt.IsZero() && c.ProgressAt.Before(c.StartedAt) {
		return recorded, fmt.Sprintf("progress at or after the call's start %s, not %s",
			c.StartedAt.Format(time.RFC3339Nano), c.ProgressAt.Format(time.RFC3339Nano)), false
	}
	first := c.FirstProgressSeconds
	if first == 0 {
		first = c.IdleSeconds
	}
	now := e.OccurredAt
	var exact string
	for i, sign := range []time.Duration{0, -1, 1} {
		lim := func(s float64) time.Duration { return secondsDuration(s) + sign*limitSlack(s) }
		call := decide.Call{Start: c.StartedAt, Cap: lim(c.BudgetSeconds), Idle: lim(c.IdleSeconds), First: lim(first), ProgressAt: c.ProgressAt}
		hit, next := call.Hit(now)
		d := callText(c, call, hit, next, now, first)
		if i == 0 {
			exact = d
		}
		if d == recorded {
			return recorded, d, true
		}
		if limitSlack(c.BudgetSeconds)+limitSlack(c.IdleSeconds)+limitSlack(first) == 0 {
			break // the exact limits are the only ones
		}
	}
	return recorded, exact, false
}

// callText renders what the call-limit rule says of c at now (hit, or
// the next instant to look) the way Replay compares it with a record.
func callText(c CallInFlight, call decide.Call, hit decide.CallLimit, next, now time.Time, first float64) string {
	progress := progressText(c.Progress, c.ProgressAt)
	limit := c.IdleSeconds
	if c.ProgressAt.IsZero() {
		limit = first
	}
	switch {
	case hit == decide.CallCap:
		return fmt.Sprintf("handler %q layer %s rule=%s_deadline measure=%.9f limit=%.9f %s", c.Name, c.Layer, c.Layer,
			now.Sub(c.StartedAt).Seconds(), c.BudgetSeconds, progress)
	case hit == decide.CallIdle:
		return fmt.Sprintf("handler %q layer %s rule=%s_idle measure=%.9f limit=%.9f %s", c.Name, c.Layer, c.Layer,
			now.Sub(call.IdleRef()).Seconds(), limit, progress)
	case call.IdleLimit() > 0 && next.Before(call.Start.Add(call.Cap)):
		return fmt.Sprintf("nothing due at %s: %s_idle not before %s", now.Format(time.RFC3339Nano), c.Layer, next.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("nothing due at %s: %s_deadline not before %s", now.Format(time.RFC3339Nano), c.Layer, next.Format(time.RFC3339Nano))
}

// progressText renders a call's last progress the way Replay compares it.
func progressText(v uint64, at time.Time) string {
	if at.IsZero() {
		return fmt.Sprintf("progress=%d (never advanced)", v)
	}
	return fmt.Sprintf("progress=%d at %s", v, at.UTC().Format(time.RFC3339Nano))
}

var limitSlack = seconds.Slack
