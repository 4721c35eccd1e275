package watchdog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/record"
)

// effects is what a step taken under w.mu asks for after unlocking. Its
// events are handed to the recorder, in order, before the lock is released
// (flushLocked); the rest runs after (apply). The scheduler reuses one
// between passes; other paths use one on their stack.
type effects struct {
	events   []entry
	cancels  []cancellation
	acts     []actItem
	after    []func()
	lateness time.Duration // the pass's: how late its most overdue item was
	pushed   bool          // events were handed to the recorder: wake it
}

// cancellation is a context to cancel with its cause: a session's (s set),
// or a RunPhase attempt's.
type cancellation struct {
	s      *Session
	cancel context.CancelCauseFunc
	cause  error
}

// record is the one way an event is queued. With ef (a step under w.mu),
// the event joins ef's, handed to the recorder in order before the lock is
// released; without, it goes to the recorder at once. An event without an
// ID gets the next one when it is built.
func (w *Watchdog) record(ef *effects, e Event) {
	shiftEvent(&e, int64(w.recOffset()))
	en := entry{ev: &e}
	if e.ID == "" {
		en.seq = w.ids.Next()
	}
	if ef == nil {
		w.rec.Push(en)
		w.rec.Poke()
		return
	}
	w.queueLocked(ef, en)
}

// queueLocked adds en to ef's events, handing them to the recorder every
// flushLen. Called with w.mu held.
func (w *Watchdog) queueLocked(ef *effects, en entry) {
	ef.events = append(ef.events, en)
	if len(ef.events) == flushLen {
		w.flushLocked(ef)
	}
}

// flushLen is how many events a step under w.mu gathers before it hands
// them to the recorder, so that a storm of fires never builds a long list.
const flushLen = 64

// flushLocked hands ef's events to the recorder, in one round trip on its
// lock. Called with w.mu held, so that events leave in the order in which
// they were decided (Resume reads the recorder's queue under w.mu). The
// recorder is woken by apply, after the contexts are cancelled.
func (w *Watchdog) flushLocked(ef *effects) {
	if len(ef.events) > 0 {
		w.rec.Push(ef.events...)
		clear(ef.events)
		ef.events = ef.events[:0]
		ef.pushed = true
	}
}

// apply carries out ef after w.mu is released: contexts are cancelled
// first, then the recorder is woken, actions are handed to the action
// goroutine and deferred work runs. It leaves ef empty for reuse.
func (w *Watchdog) apply(ef *effects) {
	for _, c := range ef.cancels {
		c.cancel(c.cause)
	}
	if ef.pushed {
		w.rec.Poke() // after the cancels: waking the recorder costs a thread wake-up
	}
	for _, f := range ef.after {
		f()
	}
	if len(ef.acts) > 0 {
		w.act.enqueue(ef.acts)
	}
	w.logFires(ef)
	clear(ef.cancels)
	clear(ef.acts)
	clear(ef.after)
	*ef = effects{events: ef.events[:0], cancels: ef.cancels[:0], acts: ef.acts[:0], after: ef.after[:0]}
}

// fireLocked decides a session that is due.
func (s *Session) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	if s.state.Load() != stateRunning || s.r().acting {
		return
	}
	w.decideLocked(s, now, ef)
}

// decideLocked decides s at now, with w.mu held, and applies the verdict: a
// Continue is recorded if worth it and rescheduled; an Advise (shadow)
// records its decision and decides again; an Act records its decision, then
// ends the window (default action) or hands it to s's action goroutine.
func (w *Watchdog) decideLocked(s *Session, now time.Time, ef *effects) {
	for {
		var sn decide.Snapshot
		sn, now = s.snapshotLocked(now) // valid under w.mu only: what is kept is copied
		v := decide.Decide(s.cfg.limits, sn, now)
		switch v.Action {
		case decide.Advise:
			facts := s.decisionFacts(sn, v, now)
			w.record(ef, s.decisionEvent("", &facts, ModeShadow, s.summary(sn, now)))
			r := s.rw()
			r.rules = v.State
			r.rules.Advised = r.rules.Advised.With(v.Rule)
			continue
		case decide.Act:
			s.setRules(v.State)
			if w.action == nil && !(v.Rule.Recoverable() && s.r().attempt != nil) {
				w.fireDefaultLocked(s, sn, v, now, ef)
				return
			}
			facts := s.decisionFacts(sn, v, now)
			summary := s.summary(sn, now)
			dec := s.decisionEvent(w.newID(), &facts, ModeAct, summary)
			w.record(ef, dec)
			ve := s.verdict(v, now, dec.ID)
			if ve.Recoverable && s.r().attempt != nil {
				// A recovery layer runs this attempt: end the attempt,
				// not the window, and measure idleness afresh.
				w.cancelAttemptLocked(s, ve, now, ef)
				return
			}
			s.rw().acting = true
			ef.acts = append(ef.acts, actItem{s: s, v: ve, pre: sn.State})
			return
		default:
			s.setRules(v.State)
			if v.Record {
				w.record(ef, s.verdictEvent(sn, v, now))
			}
			if !v.Next.IsZero() {
				// Never due again at the instant just decided: the next
				// look is at least a nanosecond later.
				w.heap.Push(&s.item, max(toNanos(v.Next), toNanos(now)+1))
			}
			return
		}
	}
}

// fireDefaultLocked ends s's window on verdict v, decided at now from sn,
// with the default action: the common fire, kept cheap (see "A fire, end to
// end" in ARCHITECTURE.md). Called with w.mu held.
func (w *Watchdog) fireDefaultLocked(s *Session, sn decide.Snapshot, v decide.Verdict, now time.Time, ef *effects) {
	s.end = ending{rule: v.Rule, at: toNanos(now), off: int64(w.recOffset()), elapsed: v.Elapsed, budget: v.Budget, decision: w.ids.Next()}
	en := entry{fire: s, seq: w.ids.Next(), facts: s.decisionFacts(sn, v, now)}
	en.facts.nch = uint8(len(sn.Channels))
	if copy(en.facts.chs[:], sn.Channels) < len(sn.Channels) {
		en.facts.more = append([]decide.Channel(nil), sn.Channels[len(en.facts.chs):]...)
	}
	w.queueLocked(ef, en)
	w.endWindowLocked(s, nil)
	ef.cancels = append(ef.cancels, cancellation{s: s, cancel: s.cancel, cause: (*firedCause)(s)})
}

// pullInLocked makes sure s is looked at by due at the latest, scheduling it
// if nothing was. Called with w.mu held, for a running session that no
// action is pending on; the caller arms the timer after unlocking.
func (w *Watchdog) pullInLocked(s *Session, due int64) {
	if !s.item.Scheduled() || due < s.item.Due {
		w.heap.Push(&s.item, due)
	}
}

// endLocked ends s's window with verdict ve (not the default action's) and
// records the cancel event, linked to the decision. Called with w.mu held.
func (w *Watchdog) endLocked(s *Session, ve *VerdictError, sn decide.Snapshot, now time.Time, ef *effects) {
	w.endWindowLocked(s, ve)
	// fired_at is the decision's instant, whenever the action completed.
	firedAt := now
	if !ve.FiredAt.IsZero() {
		firedAt = w.fromRecord(ve.FiredAt)
	}
	e := s.cancelEvent("", ve, s.summary(sn, now), s.childWait(sn, now), now, firedAt)
	rec := ve.Recoverable
	e.Recoverable = &rec
	w.record(ef, e)
	ef.cancels = append(ef.cancels, cancellation{s: s, cancel: s.cancel, cause: ve})
}

// endWindowLocked ends s's window: nothing of it is scheduled or indexed
// any more. ve is the verdict, or nil for the default action's (s.end).
// Called with w.mu held.
func (w *Watchdog) endWindowLocked(s *Session, ve *VerdictError) {
	if ve != nil {
		s.rw().fired = ve
	}
	s.state.Store(stateFired)
	s.clearActing()
	w.sessions.Del(s)
	w.heap.Remove(&s.item)
	s.dropLocked()
}

// cancelAttemptLocked ends the running RunPhase attempt with verdict ve and
// records the outcome. Called with w.mu held.
func (w *Watchdog) cancelAttemptLocked(s *Session, ve *VerdictError, now time.Time, ef *effects) {
	at := s.rare.attempt // the caller saw it set
	s.rare.attempt = nil
	e := s.event(KindAttemptCancelled, now)
	e.Reason, e.Rule, e.DecidedByDecisionID = ve.reason, ve.Rule, ve.DecisionID
	e.Recoverable = &ve.Recoverable
	e.MeasureSeconds, e.LimitSeconds = ve.Elapsed.Seconds(), ve.Budget.Seconds()
	w.record(ef, e)
	s.since = toNanos(now)
	s.setRules(decide.State{Advised: s.r().rules.Advised})
	sn, now := s.snapshotLocked(now)
	v := decide.Decide(s.cfg.limits, sn, now)
	if !v.Next.IsZero() {
		w.heap.Push(&s.item, toNanos(v.Next))
	}
	ef.cancels = append(ef.cancels, cancellation{cancel: at.cancel, cause: ve})
}

// dropLocked lets go of what the window holds when it ends: the waiting
// watchdog, and its count among the failing actions (Stats).
func (s *Session) dropLocked() {
	if r := s.rare; r != nil {
		if r.waiter != nil {
			s.w.heap.Remove(&r.waiter.item)
			r.waiter = nil
		}
		if r.failed > 0 {
			r.failed = 0
			s.w.failingActions.Add(-1)
		}
	}
	s.gen++
}

func (s *Session) childWait(sn decide.Snapshot, now time.Time) time.Duration {
	d := sn.ChildWait
	if !sn.ChildWaitOpenSince.IsZero() {
		d += max(now.Sub(sn.ChildWaitOpenSince), 0)
	}
	return d
}

// ending is what a window ended by a built-in rule with the default action
// keeps to build its verdict on demand (see firedCause). Written under w.mu
// before the context is cancelled, never changed after.
type ending struct {
	rule            decide.Rule
	at              int64 // fired at, on the timeline, Unix ns
	off             int64 // the wall clock's offset then (see timeline.go)
	elapsed, budget time.Duration
	decision        uint64 // the decision event's id number
}

// firedCause is the context cause of a window that a built-in rule ended
// with the default action: the Session itself, so that a fire allocates
// nothing. errors.As reads it as a *VerdictError, built on demand, and
// errors.Is matches the rule's sentinel.
type firedCause Session

func (c *firedCause) verdict() *VerdictError {
	v := c.verdictWithID(c.w.ids.String(c.end.decision))
	return &v
}

// verdictWithID is the verdict, its decision event's id being decisionID.
func (c *firedCause) verdictWithID(decisionID string) VerdictError {
	s := (*Session)(c)
	e := s.end
	return VerdictError{
		SessionID: s.id, Window: int(s.window), Rule: ruleNames[e.rule], reason: e.rule.Reason(),
		Elapsed: e.elapsed, Budget: e.budget, FiredAt: time.Unix(0, addNanos(e.at, e.off)).UTC(),
		Recoverable: e.rule.Recoverable(), DecisionID: decisionID,
	}
}

func (c *firedCause) Error() string { return c.verdict().Error() }

// Unwrap returns the sentinel of the rule that fired.
func (c *firedCause) Unwrap() error { return ruleSentinel(ruleNames[c.end.rule], "") }

// As sets a **VerdictError target to the verdict.
func (c *firedCause) As(target any) bool {
	if p, ok := target.(**VerdictError); ok {
		*p = c.verdict()
		return true
	}
	return false
}

// entry is one item of the recorder's queue: an event, or (fire set) the
// decision and cancel events of a default fire, built from facts by the
// recorder goroutine. An event is kept by pointer, so that the queue's
// reused slots are a quarter of the size of an Event held in place.
type entry struct {
	ev    *Event // its ID, if empty, is formatted from seq
	seq   uint64 // the event's id number; for a fire, the cancel event's
	fire  *Session
	facts decisionFacts // a fire's
}

// entryEvents appends en's events not recorded yet to dst.
func (w *Watchdog) entryEvents(dst []Event, en *entry) []Event {
	if en.fire == nil {
		e := *en.ev
		if e.ID == "" {
			e.ID = w.ids.String(en.seq)
		}
		if e.Owner == "" {
			e.Owner = w.owner
		}
		return append(dst, e)
	}
	s, f := en.fire, &en.facts
	n := min(int(f.nch), len(f.chs))
	chs := append(f.chs[:n:n], f.more...)
	summary := s.summary(decide.Snapshot{Channels: chs}, f.now)
	decisionID, cancelID := w.ids.Pair(s.end.decision, en.seq)
	ve := (*firedCause)(s).verdictWithID(decisionID)
	dec := s.decisionEvent(decisionID, f, ModeAct, summary)
	cancel := s.cancelEvent(cancelID, &ve, summary, f.childWait, f.now, f.now)
	cancel.Recoverable = dec.Recoverable // shared, as the summary is
	shiftEvent(&dec, s.end.off)          // and the summary, which cancel shares
	cancel.EvidenceSummary = nil
	shiftEvent(&cancel, s.end.off)
	cancel.EvidenceSummary = summary
	dec.Owner, cancel.Owner = w.owner, w.owner
	return append(dst, dec, cancel)
}

// decisionFacts is what a decision event records of the snapshot and the
// verdict it was decided from, read under w.mu.
type decisionFacts struct {
	now                       time.Time
	rule                      decide.Rule
	elapsed, budget           time.Duration
	childWait                 time.Duration
	bounded                   int
	calls                     []CallInFlight // the handlers running (nil: none)
	waiting                   bool
	observedSince, graceUntil time.Time
	// a default fire's channels (see entry): the first four, then more
	nch  uint8
	chs  [4]decide.Channel
	more []decide.Channel
}

// decisionFacts reads the facts of verdict v, decided at now from sn.
func (s *Session) decisionFacts(sn decide.Snapshot, v decide.Verdict, now time.Time) decisionFacts {
	return decisionFacts{now: now, rule: v.Rule, elapsed: v.Elapsed, budget: v.Budget,
		childWait: s.childWait(sn, now), bounded: sn.BoundedWork, calls: s.callsLocked(),
		waiting: sn.Waiting, observedSince: sn.ObservedSince, graceUntil: sn.GraceUntil}
}

// verdict is the error of a built-in rule's acting verdict v, decided at
// now, whose decision event is decisionID.
func (s *Session) verdict(v decide.Verdict, now time.Time, decisionID string) *VerdictError {
	return &VerdictError{
		SessionID: s.id, Window: int(s.window), Rule: ruleNames[v.Rule], reason: v.Rule.Reason(),
		Elapsed: v.Elapsed, Budget: v.Budget, FiredAt: s.w.toRecord(now),
		Recoverable: v.Rule.Recoverable(), DecisionID: decisionID,
	}
}

// event builds an event of s at now, without an ID. It reads only what
// never changes in a Session, so the recorder goroutine may call it.
func (s *Session) event(kind string, now time.Time) Event {
	now = now.UTC()
	e := Event{
		AggregateID:             s.id,
		Kind:                    kind,
		Window:                  int(s.window),
		SessionStartedAt:        s.sessionStartedAt,
		WindowStartedAt:         s.windowStartedAt,
		OccurredAt:              now,
		ElapsedSeconds:          now.Sub(s.windowStartedAt).Seconds(),
		ConfiguredBudgetSeconds: s.cfg.limits.WallClock.Seconds(),
	}
	if b := s.budgetStart(); b.After(s.windowStartedAt) {
		e.BudgetFrom = b
	}
	return e
}

// newID returns a new event id, for an event that must be linked before it
// is queued.
func (w *Watchdog) newID() string { return w.ids.String(w.ids.Next()) }

// verdictEvent records a Continue that is worth it: deferred by evidence,
// or a stale observation inside the settle window.
func (s *Session) verdictEvent(sn decide.Snapshot, v decide.Verdict, now time.Time) Event {
	e := s.event(KindVerdict, now)
	e.Rule = ruleNames[v.Rule]
	e.MeasureSeconds, e.LimitSeconds = v.Elapsed.Seconds(), v.Budget.Seconds()
	e.EvidenceSummary = s.summary(sn, now)
	e.ActiveChannel = activeName(s, v.ActiveChannel)
	e.HandlersInFlight, e.Waiting, e.ObservedSince, e.GraceUntil = sn.BoundedWork, sn.Waiting, sn.ObservedSince, sn.GraceUntil
	e.CallsInFlight = s.callsLocked()
	if !v.Deferred {
		e.SettleCount, e.SettleChecks = v.State.StaleChecks, s.cfg.limits.SettleChecks
	}
	return e
}

func activeName(s *Session, i int) string {
	switch {
	case i >= 0:
		return s.channelName(i)
	case i == decide.ActiveHandler:
		return "handler"
	case i == decide.ActiveWaiting:
		return "waiting"
	}
	return "none"
}

// decisionEvent builds the event, with id, of a rule's decision to stop the
// session. Like event it may run on the recorder goroutine.
func (s *Session) decisionEvent(id string, f *decisionFacts, mode Mode, summary []EvidenceEntry) Event {
	e := s.event(KindDecision, f.now)
	e.ID = id
	e.Rule, e.Mode, e.Reason = ruleNames[f.rule], mode, f.rule.Reason()
	rec := f.rule.Recoverable()
	e.Recoverable = &rec
	e.MeasureSeconds, e.LimitSeconds = f.elapsed.Seconds(), f.budget.Seconds()
	e.EvidenceSummary = summary
	e.ActiveChannel = "none"
	e.ChildrenWaitSeconds = f.childWait.Seconds()
	e.HandlersInFlight, e.Waiting, e.ObservedSince, e.GraceUntil = f.bounded, f.waiting, f.observedSince, f.graceUntil
	e.CallsInFlight = f.calls
	if f.rule == decide.RuleIdle {
		e.SettleCount, e.SettleChecks = s.cfg.limits.SettleChecks, s.cfg.limits.SettleChecks
	}
	return e
}

// cancelEvent builds the cancel event, with id, of verdict ve, recorded at
// now for a decision taken at firedAt (both on the timeline); the caller
// sets its Recoverable. Like event it may run on the recorder goroutine.
func (s *Session) cancelEvent(id string, ve *VerdictError, summary []EvidenceEntry, childWait time.Duration, now, firedAt time.Time) Event {
	e := s.event(KindCancel, now)
	e.ID = id
	e.Reason, e.FiredAt = ve.reason, firedAt.UTC()
	e.Rule, e.DecidedByDecisionID = ve.Rule, ve.DecisionID
	e.MeasureSeconds, e.LimitSeconds = ve.Elapsed.Seconds(), ve.Budget.Seconds()
	e.EvidenceSummary = summary
	e.ChildrenWaitSeconds = childWait.Seconds()
	return e
}

// entryLane is the recorder lane of en: its session.
func entryLane(en *entry) string {
	if en.fire != nil {
		return en.fire.id
	}
	return en.ev.AggregateID
}

// classifyAppendError sorts a store's refusal: a lost terminal race is
// dropped (the point of the refusal), an invalid event is reported by
// Close, anything else is retried.
func classifyAppendError(err error) record.Outcome {
	switch {
	case errors.Is(err, ErrAlreadyDecided), errors.Is(err, ErrAlreadyWatched):
		return record.Dropped
	case errors.Is(err, ErrInvalidEvent):
		return record.Refused
	}
	return record.Retry
}

// eventName names e in logs and errors.
func eventName(e *Event) string {
	return fmt.Sprintf("%s session %q window %d (event %s)", e.Kind, e.AggregateID, e.Window, e.ID)
}
