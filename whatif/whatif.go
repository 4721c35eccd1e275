// Package whatif re-runs a recorded event log under a candidate policy:
// what would another policy have done to the sessions it holds? See Run.
package whatif

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/policyview"
)

// Outcome is how a candidate policy's first decision in a window
// compares with the recorded one (see Run). The zero value, "", is no
// outcome: Run never returns it.
type Outcome string

// The outcomes of a window under a candidate policy.
const (
	// Unchanged: the candidate decides first at the same instant as
	// the recorded policy did, or neither decides in the window.
	Unchanged Outcome = "unchanged"
	// Earlier: the candidate decides to stop the window before the
	// recorded policy did, or stops a window that the recorded policy
	// never stopped.
	Earlier Outcome = "earlier"
	// Later: the candidate decides later than the recorded policy,
	// or not before the recorded policy's act decision ended the window
	// (what the candidate would have done after that is not in the log:
	// later, or never).
	Later Outcome = "later"
	// Never: the recorded policy decided (in shadow mode, so the
	// window went on) and the candidate never does, up to the window's
	// recorded end.
	Never Outcome = "never"
	// Undetermined: the log cannot decide the candidate's first
	// decision (see Window.Undetermined for why).
	Undetermined Outcome = "undetermined"
)

// Decision is one decision to stop a window (verdict HARD_STOP), of
// the recorded policy or of the candidate: its instant, its rule (a
// built-in rule's name or a liveness rule's) and its mode ("act" or
// "shadow"; a shadow decision lets the window go on). Plain data; the zero
// value is no decision.
type Decision struct {
	At   time.Time     `json:"at"`
	Rule string        `json:"rule"`
	Mode watchdog.Mode `json:"mode"`
}

// Change is a decision that one policy takes and the other does not:
// at the same instant with the same rule and mode. Recorded or Candidate is
// the empty watchdog.Mode for the policy that does not take it. Plain data.
type Change struct {
	At        time.Time     `json:"at"`
	Rule      string        `json:"rule"`
	Recorded  watchdog.Mode `json:"recorded,omitempty"`
	Candidate watchdog.Mode `json:"candidate,omitempty"`
}

// Window is the what-if of one session window. Plain data; Run
// fills every field but the optional ones (Undetermined, Changes,
// FalseStop, FalseStopWhy), and the slices Recorded and Candidate are
// never nil.
type Window struct {
	// SessionID and Window name the window.
	SessionID string `json:"session_id"`
	Window    int    `json:"window"`
	// OpenedAt is when a Watchdog opened the window (its start or resume
	// event); EndedAt is the last instant the log knows of it: its
	// terminal event, else its last event before the log ends or before a
	// resume re-attached it (Run does not follow a window across a
	// resume that continues it). End says which: "stop:REASON",
	// "cancel:REASON", "open" (no terminal event) or "resumed".
	OpenedAt time.Time `json:"opened_at"`
	EndedAt  time.Time `json:"ended_at"`
	End      string    `json:"end"`
	// Recorded are the window's recorded decisions up to EndedAt;
	// Candidate the candidate's, up to its first act decision or
	// DecidedUntil.
	Recorded  []Decision `json:"recorded"`
	Candidate []Decision `json:"candidate"`
	// Outcome compares the first decisions (see Outcome).
	Outcome Outcome `json:"outcome"`
	// DecidedUntil is the instant up to which the log decides the
	// candidate's verdicts: EndedAt, the candidate's act decision, or the
	// first instant the log cannot decide (then Undetermined says why).
	DecidedUntil time.Time `json:"decided_until"`
	Undetermined string    `json:"undetermined,omitempty"`
	// CheckpointEvery is the checkpoint interval Run took for the window:
	// Run's argument, else the one its Watchdog recorded on its
	// checkpoints (limit_seconds) plus a tenth for the pass's own time;
	// zero: unknown.
	CheckpointEvery time.Duration `json:"checkpoint_every_ns,omitempty"`
	// Changes are the decisions that differ, up to DecidedUntil (and the
	// candidate's stop).
	Changes []Change `json:"changes,omitempty"`
	// FalseStop is set when the candidate's first decision is followed,
	// in the same window, by recorded evidence of work or by the window's
	// stop with reason "completed": a likely false stop. FalseStopWhy
	// says which ("stdout evidence at ...", "completed at ...").
	FalseStop    bool   `json:"false_stop,omitempty"`
	FalseStopWhy string `json:"false_stop_why,omitempty"`
}

// Totals counts the windows of a Report by outcome, the likely
// false stops and the changed decisions. The zero value counts nothing.
type Totals struct {
	Sessions     int `json:"sessions"`
	Windows      int `json:"windows"`
	Unchanged    int `json:"unchanged"`
	Earlier      int `json:"earlier"`
	Later        int `json:"later"`
	Never        int `json:"never"`
	Undetermined int `json:"undetermined"`
	FalseStops   int `json:"false_stops"`
	Changes      int `json:"changes"`
}

// Report is what Run returns: each window of the log, in the order
// of its first event, and the totals. CheckpointEvery is Run's argument
// (zero: unknown), Candidate the candidate policy as given. Plain data: the
// caller owns it; the zero value is the report of an empty log.
type Report struct {
	Candidate       watchdog.Policy `json:"candidate"`
	CheckpointEvery time.Duration   `json:"checkpoint_every_ns,omitempty"`
	Windows         []Window        `json:"windows"`
	Totals          Totals          `json:"totals"`
}

// maxWhatIfLooks bounds the candidate's looks at one window.
const maxWhatIfLooks = 1 << 20

// Run re-runs the recorded log events (a log in append order, as for
// Replay; sessions may be interleaved) under candidate and reports, per
// session window and in total, the decisions that change, the windows the
// candidate stops earlier, later or never, and the likely false stops.
//
// It feeds the pure decision the Watchdog uses (the same as Replay's) with
// the window's recorded instants (session and window starts: the wall
// clock and the session ceiling are always decidable) and with the
// evidence the log proves: each channel's latest instant and counter on
// every verdict, decision, cancel and evidence checkpoint (WithCheckpoints;
// a remote worker's RecordCheckpoint is not evidence the Watchdog saw and
// is ignored). Looks follow the candidate's own schedule (each verdict's
// next instant), as a punctual Watchdog's. Counters that grow by one
// between two observations date that evidence exactly; by more, the
// evidence in between is known only to lie between the two latest
// instants; after a window's last observation nothing is known, unless
// the checkpoint interval is known: a checkpoint records every change
// within it, so no checkpoint since proves no evidence until an interval
// before the window's end. A Watchdog with WithCheckpoints records its
// interval on each checkpoint (limit_seconds), which Run takes, plus a
// tenth for the pass's own time on a real clock, when checkpointEvery is
// zero; a window without a checkpoint has none. checkpointEvery, when
// positive, is taken instead, for every window: give it only for a log
// written with WithCheckpoints(checkpointEvery), by a Watchdog with at
// most 4,096 changing windows per pass, with a margin for the pass's own
// time.
//
// With WithCallRecords the log holds each tool call's interval (a
// runtime.handler.completed event: its end and how long it ran; a call
// abandoned at its deadline, its abandoned event), and Run gives the
// candidate's idle rule the calls in flight at each look, as bounded work
// that defers it until the call ends (the Watchdog looks again then), as
// the Watchdog does live. A call that a verdict shows in flight (its
// calls_in_flight) but no record holds (past WithCallRecords' n, or one
// still running when the window ended) is in flight from its start to the
// last event that shows it, and unknown after unless that is the window's
// last event. Calls that no record holds and no verdict shows are taken to
// have been none: give WithCallRecords an n above a window's calls.
//
// Run is exact and conservative: it claims a decision at T only when
// every evidence history the log allows gives it, and otherwise reports
// the window undetermined from the first instant the log cannot decide. It
// also reports undetermined what the log does not hold: the children wait
// under a ceiling other than the recorded one (past the ceiling's age),
// a liveness rule of the user's under other settle limits, and the idle
// rule of a window whose verdicts show handlers in flight without call
// records, a waiting state or a moved idle floor (RunPhase attempts,
// waits). Windows that show none are taken to have had none.
//
// The error is for a candidate that Validate refuses (wrapping
// watchdog.ErrInvalidPolicy), a negative checkpointEvery (watchdog.ErrInvalidArgument), or a
// log Run cannot read (watchdog.ErrInvalidEvent). It is a pure function of its
// arguments, safe for concurrent use.
func Run(events []watchdog.Event, candidate watchdog.Policy, checkpointEvery time.Duration) (Report, error) {
	if err := candidate.Validate(); err != nil {
		return Report{}, fmt.Errorf("what-if: candidate policy: %w", err)
	}
	if checkpointEvery < 0 {
		return Report{}, fmt.Errorf("%w: what-if: checkpoint interval %v is negative", watchdog.ErrInvalidArgument, checkpointEvery)
	}
	type key struct {
		id     string
		window int
	}
	groups := map[key][]watchdog.Event{}
	var order []key
	for i, e := range events {
		if e.AggregateID == "" || e.Kind == "" || e.Window < 1 {
			return Report{}, fmt.Errorf("%w: what-if: event %d (%s) has no aggregate_id, event_kind or window", watchdog.ErrInvalidEvent, i, e.ID)
		}
		k := key{e.AggregateID, e.Window}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	r := Report{Candidate: policyview.Clone(candidate).(watchdog.Policy), CheckpointEvery: checkpointEvery, Windows: []Window{}}
	sessions := map[string]bool{}
	for _, k := range order {
		w := window(groups[k], candidate, checkpointEvery)
		r.Windows = append(r.Windows, w)
		sessions[k.id] = true
		t := &r.Totals
		t.Windows++
		switch w.Outcome {
		case Unchanged:
			t.Unchanged++
		case Earlier:
			t.Earlier++
		case Later:
			t.Later++
		case Never:
			t.Never++
		default:
			t.Undetermined++
		}
		if w.FalseStop {
			t.FalseStops++
		}
		t.Changes += len(w.Changes)
	}
	r.Totals.Sessions = len(sessions)
	return r, nil
}

// evidenceKnowledge is what a log proves about one channel's evidence in a
// window: instants it dates, and open intervals (after, before) holding
// evidence it does not date (before is math.MaxInt64 past the last
// observation), each for the looks after an instant (the last observation
// for the last interval, which it does not cover; else decide.Never).
type evidenceKnowledge struct {
	known []int64
	gaps  [][3]int64
}

// bounds returns the earliest and latest instants that the channel's
// latest evidence at or before t can be, by what the log proves
// (decide.Never for none).
func (k *evidenceKnowledge) bounds(t int64) (lo, hi int64) {
	lo = decide.Never
	for _, x := range k.known {
		if x <= t && x > lo {
			lo = x
		}
	}
	hi = lo
	for _, g := range k.gaps {
		if g[0] < t && g[0] < g[1]-1 && g[2] < t {
			hi = max(hi, min(t, g[1]-1))
		}
	}
	return lo, hi
}

// external is a decision the evidence rules do not derive (a
// liveness rule's, or the children wait's under the recorded ceiling), or
// the first instant the log cannot decide one (why set).
type external struct {
	at   time.Time
	rule string
	why  string
}

// call is a tool call of a window as the log shows it: in flight from
// start to end (UnixNano; end excluded, math.MaxInt64 past the window's
// end).
type call struct {
	name       string
	start, end int64
}

// recordedCall returns the call of a completed or abandoned record (e: its
// end, and how long it ran).
func recordedCall(e *watchdog.Event) call {
	end := e.OccurredAt.UnixNano()
	return call{name: e.Handler, start: end - int64(math.Round(e.MeasureSeconds*1e9)), end: end}
}

// whatIfWindow is Run of one window's events.
func window(evs []watchdog.Event, cand watchdog.Policy, ckptEvery time.Duration) Window {
	w := Window{SessionID: evs[0].AggregateID, Window: evs[0].Window, End: "open",
		Recorded: []Decision{}, Candidate: []Decision{}}
	var opening *watchdog.Event
	var recorded *watchdog.Policy
	idleOpaque := ""
	var obs []watchdog.Event
	// With call records, the calls' intervals; the calls verdicts show in
	// flight (listed), matched with them after.
	recordsOn := slices.ContainsFunc(evs, func(e watchdog.Event) bool { return e.Kind == watchdog.KindCallCompleted })
	var calls []call
	type listing struct {
		c     call // end: the listing's instant
		index int
	}
	var listed []listing
	var loggedEvery time.Duration
	end := -1 // index of the last event the window is followed to
	for i := range evs {
		e := &evs[i]
		if opening == nil {
			// A start, or a resume that opens the window (it starts then;
			// opens_window is recorded only with an arbitrating store).
			if e.Kind == watchdog.KindStart || e.Kind == watchdog.KindResume && (e.OpensWindow || e.WindowStartedAt.Equal(e.OccurredAt)) {
				opening, recorded = e, e.Policy
				w.OpenedAt = e.OccurredAt.UTC()
				end = i
				continue
			}
			// Events before the window's opening: the log does not hold it.
			continue
		}
		if e.Kind == watchdog.KindResume {
			w.End = "resumed"
			break
		}
		end = i
		if e.Kind == watchdog.KindDecision {
			w.Recorded = append(w.Recorded, Decision{At: e.OccurredAt.UTC(), Rule: e.Rule, Mode: e.Mode})
		}
		if len(e.EvidenceSummary) > 0 && !(e.Kind == watchdog.KindCheckpoint && e.Owner == "") {
			obs = append(obs, *e)
			if e.Kind == watchdog.KindCheckpoint {
				loggedEvery = max(loggedEvery, time.Duration(math.Round(e.LimitSeconds*1e9)))
			}
		}
		if recordsOn {
			switch {
			case e.Layer != string(watchdog.LayerHandler):
			case e.Kind == watchdog.KindCallCompleted, e.Kind == watchdog.KindHandlerAbandoned:
				calls = append(calls, recordedCall(e))
			}
			n := 0
			for _, c := range e.CallsInFlight {
				if c.Layer == watchdog.LayerHandler && e.HandlersInFlight > 0 {
					listed = append(listed, listing{call{c.Name, c.StartedAt.UnixNano(), e.OccurredAt.UnixNano()}, i})
					n++
				}
			}
			if n < e.HandlersInFlight && idleOpaque == "" {
				idleOpaque = fmt.Sprintf("handlers in flight at %s defer the idle rule, and the verdict does not list them all", stamp(e.OccurredAt))
			}
		}
		switch {
		case idleOpaque != "":
		case e.HandlersInFlight > 0 && !recordsOn:
			idleOpaque = fmt.Sprintf("handlers in flight at %s defer the idle rule, and the log records them only on verdicts", stamp(e.OccurredAt))
		case e.Waiting:
			idleOpaque = fmt.Sprintf("a waiting state at %s suspends the idle rule, and the log records it only on verdicts", stamp(e.OccurredAt))
		case !e.ObservedSince.IsZero() && !e.ObservedSince.Equal(opening.OccurredAt):
			idleOpaque = fmt.Sprintf("the idle floor moved to %s (a wait or a RunPhase attempt), and the log records it only on verdicts", stamp(e.ObservedSince))
		case e.Kind == watchdog.KindRetry || e.Kind == watchdog.KindAttemptCancelled || e.Kind == watchdog.KindWaitTimeout:
			idleOpaque = fmt.Sprintf("a %s event at %s moves the idle floor at instants the log does not record", e.Kind, stamp(e.OccurredAt))
		}
		if e.Terminal() {
			w.End = "stop:" + e.Reason
			if e.Kind == watchdog.KindCancel {
				w.End = "cancel:" + e.Reason
			}
			break
		}
	}
	if opening == nil {
		w.Outcome, w.Undetermined = Undetermined, "the log holds no event that opens the window (start, or a resume after its previous window ended)"
		return w
	}
	w.EndedAt = evs[end].OccurredAt.UTC()
	if last := evs[end]; last.Kind == watchdog.KindCancel && !last.FiredAt.IsZero() && last.FiredAt.Before(w.EndedAt) {
		w.EndedAt = last.FiredAt.UTC() // the recorded policy ended the window when it fired
	}
	completed := w.End == "stop:"+watchdog.StopCompleted

	// The calls verdicts show in flight that no record holds: in flight
	// from their start to the last event that shows them, through the
	// window's end if that is its last event; after, unknown (from
	// unknownAfter on, the idle rule is undetermined where it would count).
	unknownAfter, unknownWhy := int64(math.MaxInt64), ""
	for i, l := range listed {
		if slices.ContainsFunc(calls, func(c call) bool { return c.name == l.c.name && c.start == l.c.start }) ||
			slices.ContainsFunc(listed[i+1:], func(m listing) bool { return m.c.name == l.c.name && m.c.start == l.c.start }) {
			continue // recorded, or shown again later
		}
		c := l.c
		if l.index == end {
			c.end = math.MaxInt64
		} else {
			c.end++ // in flight at the listing's instant
			if c.end-1 < unknownAfter {
				unknownAfter = c.end - 1
				unknownWhy = fmt.Sprintf("the call %q in flight at %s has no record of its end (past WithCallRecords' n?), and calls in flight defer the idle rule",
					c.name, stamp(time.Unix(0, unknownAfter)))
			}
		}
		calls = append(calls, c)
	}
	if ckptEvery == 0 && loggedEvery > 0 {
		ckptEvery = loggedEvery + loggedEvery/10 // the pass's own time on a real clock
	}
	w.CheckpointEvery = ckptEvery

	// The channels the candidate sees, and what the log proves of each.
	l := policyview.Limits(cand)
	names := append(slices.Clone(policyview.BuiltinChannels), cand.Channels...)
	know := make([]evidenceKnowledge, len(names))
	tailFrom := decide.Never
	if ckptEvery > 0 && w.End != "resumed" {
		tailFrom = w.EndedAt.Add(-ckptEvery).UnixNano()
	}
	for c, name := range names {
		k := &know[c]
		prevLast, prevCount, seen := decide.Never, uint64(0), false
		prevAt := opening.OccurredAt.UnixNano()
		for _, e := range obs {
			for _, en := range e.EvidenceSummary {
				if en.Channel != name {
					continue
				}
				last := decide.Never
				if en.LastAt != nil {
					last = en.LastAt.UnixNano()
					k.known = append(k.known, last)
				}
				if en.Counter != prevCount && (en.Counter != prevCount+1 || last == decide.Never) ||
					en.Counter == prevCount && last != prevLast {
					// More than one new instant (or an inconsistent
					// pair): evidence the log does not date lies between.
					k.gaps = append(k.gaps, [3]int64{min(prevLast, last), max(prevLast, last), decide.Never})
				}
				prevLast, prevCount, seen = last, en.Counter, true
			}
			prevAt = e.OccurredAt.UnixNano()
		}
		if seen || slices.Contains(policyview.BuiltinChannels, name) || recorded == nil || slices.Contains(recorded.Channels, name) {
			// After the last observation: evidence the log does not hold,
			// dated after it (evidence is dated by a clock reading, and an
			// observation lists all evidence dated up to its instant but a
			// Touch that raced it by the nanoseconds between its reading and
			// its store).
			k.gaps = append(k.gaps, [3]int64{max(prevLast, tailFrom, prevAt), 1<<63 - 1, prevAt})
		}
	}

	// Decisions the evidence rules do not derive.
	var ext []external
	var recLimits decide.Limits
	if recorded != nil {
		recLimits = policyview.Limits(*recorded)
	}
	if l.ChildWaitCeiling > 0 {
		if recorded != nil && recLimits.ChildWaitCeiling == l.ChildWaitCeiling {
			for _, d := range w.Recorded {
				if d.Rule == "children_wait" {
					ext = append(ext, external{at: d.At, rule: d.Rule})
					break
				}
			}
		} else {
			ext = append(ext, external{at: opening.WindowStartedAt.Add(l.ChildWaitCeiling).Add(time.Nanosecond).UTC(),
				why: "the children wait could exceed the candidate's ceiling from here, and the log records the waits only against the recorded ceiling"})
		}
	}
	for _, rule := range cand.LivenessRules {
		same := recorded != nil && slices.Contains(recorded.LivenessRules, rule) &&
			recLimits.SettleChecks == l.SettleChecks && recLimits.SettleInterval == l.SettleInterval
		for _, e := range evs[:end+1] {
			if e.Rule != rule || (e.Kind != watchdog.KindDecision && e.Kind != watchdog.KindVerdict) {
				continue
			}
			if !same {
				ext = append(ext, external{at: e.OccurredAt.UTC(),
					why: fmt.Sprintf("the liveness rule %q observed staleness here, and the log holds its observations only under the recorded settle limits", rule)})
				break
			}
			if e.Kind == watchdog.KindDecision {
				ext = append(ext, external{at: e.OccurredAt.UTC(), rule: rule})
			}
		}
	}
	sort.SliceStable(ext, func(i, j int) bool { return ext[i].at.Before(ext[j].at) })

	// The candidate's looks.
	sn := decide.Snapshot{
		SessionStartedAt: opening.SessionStartedAt,
		WindowStartedAt:  opening.WindowStartedAt,
		ObservedSince:    opening.OccurredAt,
		Channels:         make([]decide.Channel, 2),
	}
	if g := l.StartupGrace; g > 0 && opening.WindowStartedAt.Add(g).After(opening.OccurredAt) {
		sn.GraceUntil = opening.WindowStartedAt.Add(g)
	}
	floor := opening.OccurredAt.UnixNano()
	undetermined := func(at time.Time, why string) {
		w.Outcome, w.DecidedUntil, w.Undetermined = Undetermined, at, why
	}
	decided := false
	t := opening.OccurredAt.UTC()
	for looks := 0; w.Outcome == ""; looks++ {
		if len(ext) > 0 && !ext[0].at.After(t) && !ext[0].at.After(w.EndedAt) {
			x := ext[0]
			ext = ext[1:]
			if x.why != "" {
				undetermined(x.at, x.why)
				break
			}
			mode := watchdog.Mode(policyview.RuleMode(cand, x.rule))
			w.Candidate = append(w.Candidate, Decision{At: x.at, Rule: x.rule, Mode: mode})
			if mode == watchdog.ModeAct {
				w.DecidedUntil, decided = x.at, true
				break
			}
			if r, ok := policyview.RuleByName[x.rule]; ok {
				sn.State.Advised = sn.State.Advised.With(r)
			}
			continue
		}
		if t.After(w.EndedAt) {
			w.DecidedUntil, decided = w.EndedAt, true
			break
		}
		if looks > maxWhatIfLooks {
			undetermined(t, fmt.Sprintf("more than %d looks in one window", maxWhatIfLooks))
			break
		}
		// The calls in flight at t: bounded work, as the Watchdog counts
		// it, until the first of them ends (it looks again then).
		now, ends, until := t.UnixNano(), int64(math.MaxInt64), int64(math.MaxInt64)
		sn.BoundedWork, sn.BoundedUntil = 0, time.Time{}
		for _, c := range calls {
			if c.start <= now && now < c.end {
				sn.BoundedWork++
				until = min(until, c.end, w.EndedAt.UnixNano()+1)
			}
			if c.end > now {
				ends = min(ends, c.end)
			}
		}
		if sn.BoundedWork > 0 {
			sn.BoundedUntil = time.Unix(0, until).UTC() // the first of them is over
		}
		v, why := decideBounded(l, &sn, know, names, floor, t)
		if why != "" {
			undetermined(t, why)
			break
		}
		idle := v.Rule == decide.RuleIdle && (v.Record || v.Action != decide.Continue)
		if idle && idleOpaque != "" {
			undetermined(t, idleOpaque)
			break
		}
		if idle && now > unknownAfter {
			undetermined(t, unknownWhy)
			break
		}
		sn.State = v.State
		switch v.Action {
		case decide.Act:
			w.Candidate = append(w.Candidate, Decision{At: t, Rule: policyview.RuleNames[v.Rule], Mode: watchdog.ModeAct})
			w.DecidedUntil, decided = t, true
		case decide.Advise:
			w.Candidate = append(w.Candidate, Decision{At: t, Rule: policyview.RuleNames[v.Rule], Mode: watchdog.ModeShadow})
			sn.State.Advised = sn.State.Advised.With(v.Rule)
			continue // decide again at the same instant, as the Watchdog does
		default:
			next := v.Next.UTC()
			if ends != math.MaxInt64 && (next.IsZero() || ends < next.UnixNano()) {
				next = time.Unix(0, ends).UTC() // a call ends: the Watchdog looks again
			}
			if !next.After(t) {
				next = t.Add(time.Nanosecond)
			}
			t = next
			continue
		}
		break
	}

	// Compare the first decisions.
	var rec, can *Decision
	if len(w.Recorded) > 0 {
		rec = &w.Recorded[0]
	}
	if len(w.Candidate) > 0 {
		can = &w.Candidate[0]
	}
	switch {
	case can != nil && (rec == nil || can.At.Before(rec.At)):
		w.Outcome = Earlier
	case can != nil && can.At.Equal(rec.At):
		w.Outcome = Unchanged
	case can != nil:
		w.Outcome = Later
	case decided && rec == nil:
		w.Outcome = Unchanged
	case decided && rec.Mode == watchdog.ModeShadow:
		w.Outcome = Never // the window went on to its end
	case decided, rec != nil && rec.At.Before(w.DecidedUntil):
		// Not by the recorded decision, proved even where the log
		// cannot decide the rest.
		w.Outcome = Later
	default:
		w.Outcome = Undetermined
	}
	if w.Outcome != Undetermined {
		w.Undetermined = ""
	}

	// The decisions that change, up to where both are known.
	horizon := w.DecidedUntil
	inCand := func(d Decision) bool { return slices.Contains(w.Candidate, d) }
	for _, d := range w.Recorded {
		if !d.At.After(horizon) && !inCand(d) {
			w.Changes = append(w.Changes, Change{At: d.At, Rule: d.Rule, Recorded: d.Mode})
		}
	}
	for _, d := range w.Candidate {
		if !slices.Contains(w.Recorded, d) {
			w.Changes = append(w.Changes, Change{At: d.At, Rule: d.Rule, Candidate: d.Mode})
		}
	}
	sort.SliceStable(w.Changes, func(i, j int) bool { return w.Changes[i].At.Before(w.Changes[j].At) })

	// A likely false stop: work or completion after the candidate's stop.
	if can != nil {
		first := int64(1<<63 - 1)
		ch := ""
		for c := range know {
			for _, x := range know[c].known {
				if x > can.At.UnixNano() && x < first {
					first, ch = x, names[c]
				}
			}
		}
		switch {
		case ch != "":
			w.FalseStop, w.FalseStopWhy = true, fmt.Sprintf("%s evidence at %s", ch, stamp(time.Unix(0, first)))
		case completed && w.EndedAt.After(can.At):
			w.FalseStop, w.FalseStopWhy = true, "completed at "+stamp(w.EndedAt)
		}
	}
	return w
}

// decideBounded decides the candidate's look at t over every evidence the
// log allows: the baseline's latest instant and the freshest other
// channel's, each between its bounds (the verdict is monotone in both, but
// for the startup grace, which a first output ends: the idle floor is
// tried too). It returns the verdict if they all agree, else why not.
func decideBounded(l decide.Limits, sn *decide.Snapshot, know []evidenceKnowledge, names []string, floor int64, t time.Time) (decide.Verdict, string) {
	now := t.UnixNano()
	lo0, hi0 := know[0].bounds(now)
	loB, hiB := decide.Never, decide.Never
	for c := 1; c < len(know); c++ {
		lo, hi := know[c].bounds(now)
		loB, hiB = max(loB, lo), max(hiB, hi)
	}
	base := []int64{lo0, hi0}
	if lo0 < floor && floor <= hi0 {
		base = append(base, floor)
	}
	others := []int64{loB, hiB}
	var first decide.Verdict
	for i, b := range base {
		for j, o := range others {
			sn.Channels[0], sn.Channels[1] = decide.Channel{Last: b}, decide.Channel{Last: o}
			v := decide.Decide(l, *sn, t)
			if i == 0 && j == 0 {
				first = v
				continue
			}
			if v.Action != first.Action || v.Rule != first.Rule || v.Record != first.Record || v.Deferred != first.Deferred ||
				!v.Next.Equal(first.Next) || v.State != first.State {
				return first, whyUnknown(know, names, now, t)
			}
		}
	}
	return first, ""
}

// whyUnknown names the channel whose undated evidence makes the look at t
// undecidable.
func whyUnknown(know []evidenceKnowledge, names []string, now int64, t time.Time) string {
	for c := range know {
		lo, hi := know[c].bounds(now)
		if lo == hi {
			continue
		}
		from := "the window's start"
		if lo != decide.Never {
			from = stamp(time.Unix(0, lo))
		}
		return fmt.Sprintf("at %s the log does not date %s evidence after %s (no observation of it until later, or none at all)",
			stamp(t), names[c], from)
	}
	return fmt.Sprintf("at %s the log does not date the evidence", stamp(t))
}

// stamp formats an instant for a what-if's texts.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
