package watchdog

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// schedule is the Watchdog's one scheduler goroutine. It sleeps until the
// clock timer for the earliest deadline wakes it, or Check asks it to settle,
// then decides every session that is due.
func (w *Watchdog) schedule() {
	var rtC <-chan time.Time // the real clock's timer, read here directly
	if w.rt != nil {
		rtC = w.rt.C
	}
	var bsC <-chan struct{} // its backstop's (see backstop)
	if w.bs != nil {
		bsC = w.bs.C
	}
	for {
		select {
		case <-w.done:
			return
		case <-rtC:
			w.runDue()
		case <-bsC:
			w.runDue()
		case <-w.wakeCh:
			w.runDue()
		case req := <-w.checkCh:
			w.runDue()
			close(req)
		}
	}
}

// wake is the clock timer's callback. A late or duplicate call only makes
// the scheduler look at the heap once more.
func (w *Watchdog) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

type firing struct {
	s *Session
	v *VerdictError
}

// timed is anything the scheduler's heap holds: a session, a deadline
// layer, a wait.
type timed interface {
	// fireLocked handles the item's due instant, with w.mu held; work that
	// must run after unlocking goes to d.
	fireLocked(w *Watchdog, now time.Time, d *dueWork)
}

// dueWork is what one scheduler pass does after releasing the lock.
type dueWork struct {
	fired    []firing
	acts     []actItem
	after    []func()
	lateness time.Duration
	popped   bool
}

func (s *Session) fireLocked(w *Watchdog, now time.Time, d *dueWork) {
	d.popped = true
	if s.state.Load() != stateRunning || s.r().acting {
		return
	}
	f, a := w.decideLocked(s, now)
	if f != nil {
		d.fired = append(d.fired, *f)
	}
	if a != nil {
		d.acts = append(d.acts, *a)
	}
}

// runDue decides every session due at the clock's now, applies what the
// verdicts ask and re-arms the timer for the next deadline. Events go to the
// recorder and custom actions to the action goroutine; no store, log or user
// call runs under the lock, nor on this goroutine.
//
// runDue runs on the scheduler goroutine only; it reuses w.due between
// passes, so a pass allocates nothing of its own.
func (w *Watchdog) runDue() {
	now := w.clock.Now()
	nowNs := toNanos(now)
	w.coarse.refresh(nowNs)
	d := &w.due
	// timerMu first (the lock order), so that the timer is re-armed from the
	// heap as this pass leaves it, with no second round trip on mu.
	w.timerMu.Lock()
	w.mu.Lock()
	// The pass holds the recorder's queue: its events go in without a lock
	// round trip each (contended by the recorder goroutine, that cost more
	// than the decisions at 100,000 fires), in order, before w.mu is released.
	w.rec.hold()
	w.passing = true
	// Pop every due item first: whatever a handler pushes back during
	// this pass waits for the next one, so a pass always ends.
	due := w.popped[:0]
	for it := w.heap.PopDue(nowNs); it != nil; it = w.heap.PopDue(nowNs) {
		if late := time.Duration(nowNs - it.Due); late > d.lateness {
			d.lateness = late
		}
		due = append(due, it.Value)
	}
	for i, t := range due {
		t.fireLocked(w, now, d)
		due[i] = nil
	}
	w.popped = due[:0]
	w.passing = false
	recorded := w.rec.release()
	next, ok := w.topDueLocked()
	closed := w.closed
	w.mu.Unlock()
	w.armLocked(next, ok && !closed)
	w.timerMu.Unlock()
	for _, f := range d.fired {
		f.s.cancel(f.v)
	}
	if recorded {
		w.rec.poke() // after the cancels: waking the recorder costs a thread wake-up
	}
	for _, f := range d.after {
		f()
	}
	if len(d.acts) > 0 {
		w.act.enqueue(d.acts)
	}
	if d.popped && w.obs.OnSchedulerTick != nil {
		w.obs.OnSchedulerTick(d.lateness)
	}
	if len(d.fired) > 0 && w.log.Core().Enabled(zap.InfoLevel) { // no fields built when disabled
		for _, f := range d.fired {
			w.log.Info("watchdog: session cancelled", zap.String("session_id", f.s.id),
				zap.Int("window", int(f.s.window)), zap.String("reason", f.v.Reason),
				zap.Duration("measure", f.v.Elapsed), zap.Duration("limit", f.v.Budget))
		}
	}
	d.reset()
}

// reset empties d for the next pass, keeping its buffers and dropping what
// they point to.
func (d *dueWork) reset() {
	clear(d.fired)
	clear(d.acts)
	clear(d.after)
	*d = dueWork{fired: d.fired[:0], acts: d.acts[:0], after: d.after[:0]}
}

// enqueueLocked hands e to the recorder; during a scheduler pass, into the
// queue the pass holds. Called with w.mu held.
func (w *Watchdog) enqueueLocked(e Event) {
	if w.passing {
		w.rec.pushHeld(queued{Event: e})
		return
	}
	w.rec.enqueue(e)
}

// enqueueFireLocked hands the decision and cancel events of f to the
// recorder, to be built there. Called with w.mu held.
func (w *Watchdog) enqueueFireLocked(f *fireRecord) {
	if w.passing {
		w.rec.pushFireHeld(f)
		return
	}
	w.rec.enqueueFire(f)
}

// decideLocked decides session s at now and applies the verdict: a Continue
// is recorded if it is worth it and rescheduled; an Advise (shadow) records
// its decision and decides again; an Act records its decision, then ends the
// window (default action) or hands it to the action goroutine. Called with
// w.mu held.
func (w *Watchdog) decideLocked(s *Session, now time.Time) (*firing, *actItem) {
	for {
		sn := s.snapshotLocked() // used under w.mu only: the summary copies it
		v := decide.Decide(s.cfg.limits, sn, now)
		switch v.Action {
		case decide.Advise:
			facts := s.decisionFacts(sn, v, now, nil)
			w.enqueueLocked(s.decisionEvent(w.newEventID(), &facts, ModeShadow))
			r := s.rw()
			r.rules = v.State
			r.rules.Advised = r.rules.Advised.With(v.Rule)
			continue
		case decide.Act:
			s.setRules(v.State)
			if w.action == nil && !(v.Rule.Recoverable() && s.r().attempt != nil) {
				// The common fire: the window ends now and its decision and
				// cancel events are queued as one record, built into events
				// by the recorder goroutine (see fireRecord).
				return &firing{s, w.fireDefaultLocked(s, sn, v, now)}, nil
			}
			facts := s.decisionFacts(sn, v, now, nil)
			dec := s.decisionEvent(w.newEventID(), &facts, ModeAct)
			w.enqueueLocked(dec)
			verdict := s.verdict(v, now, dec.ID, dec.EvidenceSummary)
			ve := &verdict
			if ve.Recoverable && s.r().attempt != nil {
				// A recovery layer runs this attempt: end the attempt,
				// not the window, and measure idleness afresh.
				w.cancelAttemptLocked(s, ve, now)
				return nil, nil
			}
			s.rw().acting = true
			return nil, &actItem{s: s, v: ve, pre: sn.State}
		default:
			w.continueLocked(s, sn, v, now)
			return nil, nil
		}
	}
}

// continueLocked applies a Continue verdict. Called with w.mu held.
func (w *Watchdog) continueLocked(s *Session, sn decide.Snapshot, v decide.Verdict, now time.Time) {
	s.setRules(v.State)
	if v.Record {
		w.enqueueLocked(w.verdictEvent(s, sn, v, now))
	}
	if !v.Next.IsZero() {
		// Never due again at the instant just decided: the next look is
		// at least a nanosecond later.
		w.heap.Push(&s.item, max(toNanos(v.Next), toNanos(now)+1))
	}
}

// pullInLocked makes sure s is looked at by due at the latest, scheduling it
// if nothing was. Called with w.mu held, for a running session that no
// action is pending on; the caller arms the timer after unlocking.
func (w *Watchdog) pullInLocked(s *Session, due int64) {
	if !s.item.Scheduled() || due < s.item.Due {
		w.heap.Push(&s.item, due)
	}
}

// endLocked ends s's window with verdict ve and records the cancel event,
// linked to the decision. summary is the evidence summary of sn at now if the
// caller has it already (nil: computed here). The caller cancels the context
// after unlocking. Called with w.mu held.
func (w *Watchdog) endLocked(s *Session, ve *VerdictError, sn decide.Snapshot, summary []EvidenceEntry, now time.Time) {
	w.endWindowLocked(s, ve)
	if summary == nil {
		summary = s.summary(sn, now)
	}
	w.enqueueLocked(s.cancelEvent(w.newEventID(), ve, summary, s.childWait(sn, now), now))
}

// endWindowLocked ends s's window with verdict ve: nothing of it is
// scheduled or indexed any more. A nil ve: the caller keeps the verdict in
// s.item.Value (see fireDefaultLocked). Called with w.mu held.
func (w *Watchdog) endWindowLocked(s *Session, ve *VerdictError) {
	if ve != nil {
		s.rw().fired = ve
	}
	s.state.Store(stateFired)
	s.clearActing()
	w.sessions.del(s)
	w.heap.Remove(&s.item)
	s.dropWaiterLocked()
}

// cancelEvent builds the cancel event with id of verdict ve. Like
// eventWithID it may run on the recorder goroutine.
func (s *Session) cancelEvent(id string, ve *VerdictError, summary []EvidenceEntry, childWait time.Duration, now time.Time) Event {
	e := s.eventWithID(id, KindCancel, now)
	e.Reason, e.StopReasonCode, e.FiredAt = ve.Reason, ve.StopReasonCode(), e.OccurredAt
	e.Verdict, e.Rule, e.DecidedByDecisionID = VerdictHardStop, ve.Rule, ve.DecisionID
	e.Recoverable = &ve.Recoverable
	e.MeasureSeconds, e.LimitSeconds = ve.Elapsed.Seconds(), ve.Budget.Seconds()
	e.EvidenceSummary = summary
	e.ChildrenWaitSeconds = childWait.Seconds()
	return e
}

// cancelAttemptLocked ends the running RunPhase attempt with verdict ve and
// records the outcome. Called with w.mu held.
func (w *Watchdog) cancelAttemptLocked(s *Session, ve *VerdictError, now time.Time) {
	at := s.rare.attempt // the caller saw it set
	s.rare.attempt = nil
	e := w.event(s, KindAttemptCancelled, now)
	e.Reason, e.Rule, e.Verdict, e.DecidedByDecisionID = ve.Reason, ve.Rule, VerdictHardStop, ve.DecisionID
	e.Recoverable = &ve.Recoverable
	e.MeasureSeconds, e.LimitSeconds = ve.Elapsed.Seconds(), ve.Budget.Seconds()
	w.enqueueLocked(e)
	s.since = toNanos(now)
	s.setRules(decide.State{Advised: s.r().rules.Advised})
	v := decide.Decide(s.cfg.limits, s.snapshotLocked(), now)
	if !v.Next.IsZero() {
		w.heap.Push(&s.item, toNanos(v.Next))
	}
	at.cancel(ve) // cancelling a context only closes channels: safe under the lock
}

// dropWaiterLocked disarms the waiting watchdog when the window ends.
func (s *Session) dropWaiterLocked() {
	if r := s.rare; r != nil && r.waiter != nil {
		s.w.heap.Remove(&r.waiter.item)
		r.waiter = nil
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

// verdictEvent records a Continue that is worth it: deferred by evidence,
// or a stale observation inside the settle window.
func (w *Watchdog) verdictEvent(s *Session, sn decide.Snapshot, v decide.Verdict, now time.Time) Event {
	e := w.event(s, KindVerdict, now)
	e.Verdict, e.Rule = VerdictContinue, ruleNames[v.Rule]
	e.MeasureSeconds, e.LimitSeconds = v.Elapsed.Seconds(), v.Budget.Seconds()
	e.EvidenceSummary = s.summary(sn, now)
	e.ActiveChannel = activeName(s, v.ActiveChannel)
	e.HandlersInFlight, e.Waiting, e.ObservedSince, e.GraceUntil = sn.BoundedWork, sn.Waiting, sn.ObservedSince, sn.GraceUntil
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

// decisionFacts is what a decision event records of the snapshot and the
// verdict it was decided from, read under w.mu.
type decisionFacts struct {
	now                       time.Time
	rule                      decide.Rule
	elapsed, budget           time.Duration
	summary                   []EvidenceEntry
	childWait                 time.Duration
	bounded                   int
	waiting                   bool
	observedSince, graceUntil time.Time
}

// decisionFacts reads the facts of verdict v, decided at now from sn; the
// evidence summary goes in buf's storage if it has room (see summaryInto).
func (s *Session) decisionFacts(sn decide.Snapshot, v decide.Verdict, now time.Time, buf []EvidenceEntry) decisionFacts {
	return decisionFacts{now: now, rule: v.Rule, elapsed: v.Elapsed, budget: v.Budget,
		summary: s.summaryInto(buf, sn, now), childWait: s.childWait(sn, now), bounded: sn.BoundedWork,
		waiting: sn.Waiting, observedSince: sn.ObservedSince, graceUntil: sn.GraceUntil}
}

// verdict is the error of a built-in rule's acting verdict v, decided at
// now, whose decision event is decisionID with evidence summary evidence.
func (s *Session) verdict(v decide.Verdict, now time.Time, decisionID string, evidence []EvidenceEntry) VerdictError {
	return VerdictError{
		SessionID: s.id, Window: int(s.window), Rule: ruleNames[v.Rule], Reason: v.Rule.Reason(),
		Elapsed: v.Elapsed, Budget: v.Budget, FiredAt: now.UTC(),
		Recoverable: v.Rule.Recoverable(), DecisionID: decisionID, Evidence: evidence,
	}
}

// decisionEvent builds the event, with id, of a rule's decision to stop the
// session. Like eventWithID it may run on the recorder goroutine.
func (s *Session) decisionEvent(id string, f *decisionFacts, mode Mode) Event {
	e := s.eventWithID(id, KindDecision, f.now)
	e.Verdict, e.Rule, e.Mode, e.Reason = VerdictHardStop, ruleNames[f.rule], mode, f.rule.Reason()
	rec := f.rule.Recoverable()
	e.Recoverable = &rec
	e.MeasureSeconds, e.LimitSeconds = f.elapsed.Seconds(), f.budget.Seconds()
	e.EvidenceSummary = f.summary
	e.ActiveChannel = "none"
	e.ChildrenWaitSeconds = f.childWait.Seconds()
	e.HandlersInFlight, e.Waiting, e.ObservedSince, e.GraceUntil = f.bounded, f.waiting, f.observedSince, f.graceUntil
	if f.rule == decide.RuleIdle {
		e.SettleCount, e.SettleChecks = s.cfg.limits.SettleChecks, s.cfg.limits.SettleChecks
	}
	return e
}

// armIfEarlier arms the clock timer for due unless it is already armed for
// an instant at or before due.
func (w *Watchdog) armIfEarlier(due int64) {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	if w.armed && w.armedAt <= due {
		return
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if !closed {
		w.setTimerLocked(due)
	}
}

// rearm arms the clock timer for the earliest deadline in the heap. Holding
// timerMu while reading the heap orders it with armIfEarlier: a deadline
// pushed after the read arms its own timer if it is earlier.
func (w *Watchdog) rearm() {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	w.mu.Lock()
	due, ok := w.topDueLocked()
	closed := w.closed
	w.mu.Unlock()
	w.armLocked(due, ok && !closed)
}

// topDueLocked returns the heap's earliest due instant, and false if the
// heap is empty. Called with mu held: an item's Due changes under mu.
func (w *Watchdog) topDueLocked() (int64, bool) {
	top := w.heap.Peek()
	if top == nil {
		return 0, false
	}
	return top.Due, true
}

// armLocked arms the clock timer for due (arm), or disarms it (the heap is
// empty or the Watchdog closed). Called with timerMu held.
func (w *Watchdog) armLocked(due int64, arm bool) {
	if !arm {
		w.stopTimerLocked()
		return
	}
	w.setTimerLocked(due)
}

// stopTimerLocked disarms the clock timer. Called with timerMu held.
func (w *Watchdog) stopTimerLocked() {
	if w.rt != nil {
		w.rt.Stop()
	}
	if w.bs != nil {
		w.bs.stop()
	}
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.armed = false
	w.armedDue.Store(0)
}

// setTimerLocked arms the clock timer for due. The real clock's timer is
// one time.Timer, reset in place and read by the scheduler goroutine; any
// other Clock gets an AfterFunc per arming. Called with timerMu held.
func (w *Watchdog) setTimerLocked(due int64) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.armed, w.armedAt = true, due
	w.armedDue.Store(due)
	now := toNanos(w.clock.Now())
	d := time.Duration(0)
	if due > now {
		if now < 0 && due > math.MaxInt64+now {
			d = math.MaxInt64
		} else {
			d = time.Duration(due - now)
		}
	}
	if w.rt != nil {
		w.rt.Reset(d)
		if w.bs != nil {
			w.bs.arm(d)
		}
		return
	}
	w.timer = w.clock.AfterFunc(d, w.wake)
}

// lateTimerSlack is how late the scheduler's real-clock timer may be before
// the recorder yields its P for it (schedulerOverdue) and, on Linux, the
// backstop wakes the scheduler.
const lateTimerSlack = 200 * time.Microsecond

// schedulerOverdue reports whether the scheduler's timer is more than
// lateTimerSlack overdue: its goroutine has not run the pass due then. It
// reports so once per due instant. The recorder goroutine calls it between
// batches and then yields its P (see recorder.overdue).
func (w *Watchdog) schedulerOverdue() bool {
	due := w.armedDue.Load()
	if due == 0 || due == w.yieldedFor || toNanos(w.clock.Now())-due < int64(lateTimerSlack) {
		return false
	}
	w.yieldedFor = due
	return true
}

// actItem is an acting decision waiting for the configured action, or a
// user callback (call) to run off the scheduler.
type actItem struct {
	s         *Session
	v         *VerdictError
	pre       decide.State // the rules' memory just before the decision
	call      func(ctx context.Context)
	noRecheck bool // a user liveness rule: its observation cannot be re-derived
}

// actor runs the configured ActionFunc on its own goroutine, one at a time.
// Its queue is unbounded, so a slow action never blocks the scheduler.
type actor struct {
	worker
	w       *Watchdog
	mu      sync.Mutex
	pending []actItem
	ctx     context.Context
	cancel  context.CancelFunc
}

func newActor(w *Watchdog) *actor {
	ctx, cancel := context.WithCancel(context.Background())
	return &actor{worker: newWorker(), w: w, ctx: ctx, cancel: cancel}
}

// enqueue hands acting decisions to the action goroutine. It never blocks.
func (a *actor) enqueue(items []actItem) {
	a.mu.Lock()
	a.pending = append(a.pending, items...)
	a.mu.Unlock()
	a.poke()
}

func (a *actor) drain() {
	for {
		a.mu.Lock()
		items := a.pending
		a.pending = nil
		a.mu.Unlock()
		if len(items) == 0 {
			return
		}
		for _, it := range items {
			select {
			case <-a.stop:
				return
			default:
			}
			if it.call != nil {
				a.w.runCallback(a.ctx, it.call)
				continue
			}
			a.w.runAction(a.ctx, it)
		}
	}
}

func (a *actor) run() { a.loop(a.drain) }

// close stops the action goroutine: it cancels the context of a running
// action or callback and waits for it to return, until ctx ends.
func (a *actor) close(ctx context.Context) error {
	a.cancel()
	close(a.stop)
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watchdog: close: an action or callback ignores its context and is still running: %w", ctx.Err())
	}
}

// runAction re-derives the verdict at the action's own instant, runs the
// configured action if it still acts, and records the outcome.
func (w *Watchdog) runAction(ctx context.Context, it actItem) {
	s := it.s
	now := w.clock.Now()
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		w.mu.Unlock() // the window ended meanwhile: a benign no-op
		return
	}
	// Derive the verdict again at the action's own instant, from the
	// rules' memory as it was just before the decision.
	sn := s.snapshot()
	sn.State = it.pre
	v := decide.Decide(s.cfg.limits, sn, now)
	if !it.noRecheck && (v.Action != decide.Act || ruleNames[v.Rule] != it.v.Rule) {
		s.clearActing()
		e := w.event(s, KindSuperseded, now)
		e.Rule, e.Reason, e.DecidedByDecisionID = it.v.Rule, it.v.Reason, it.v.DecisionID
		e.EvidenceSummary = s.summary(sn, now)
		w.rec.enqueue(e)
		// Then decide afresh, as the scheduler would: a Continue is
		// rescheduled, a shadow rule advises, another rule may act.
		s.setRules(it.pre)
		_, again := w.decideLocked(s, now)
		w.mu.Unlock()
		w.armIfEarlier(toNanos(now) + 1)
		if again != nil {
			w.act.enqueue([]actItem{*again})
		}
		w.log.Info("watchdog: decision superseded by fresh evidence", zap.String("session_id", s.id),
			zap.String("rule", it.v.Rule), zap.String("decision_id", it.v.DecisionID))
		return
	}
	w.mu.Unlock()

	err := w.callAction(ctx, s, it.v)

	now = w.clock.Now()
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		w.mu.Unlock()
		return
	}
	s.clearActing()
	if err != nil {
		e := w.event(s, KindActionFailed, now)
		e.Rule, e.Reason, e.DecidedByDecisionID, e.Error = it.v.Rule, it.v.Reason, it.v.DecisionID, err.Error()
		w.rec.enqueue(e)
		due := toNanos(now.Add(s.cfg.limits.SettleInterval))
		w.heap.Push(&s.item, due)
		w.mu.Unlock()
		w.armIfEarlier(due)
		w.log.Error("watchdog: action failed; the session keeps running and the rule is looked at again",
			zap.String("session_id", s.id), zap.String("rule", it.v.Rule),
			zap.String("decision_id", it.v.DecisionID), zap.Error(err))
		return
	}
	w.endLocked(s, it.v, sn, nil, now)
	w.mu.Unlock()
	s.cancel(it.v)
	w.log.Info("watchdog: session stopped by action", zap.String("session_id", s.id),
		zap.String("reason", it.v.Reason), zap.String("decision_id", it.v.DecisionID))
}

// runCallback runs a user callback, logging a panic instead of crashing the
// Watchdog.
func (w *Watchdog) runCallback(ctx context.Context, call func(context.Context)) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("watchdog: callback panicked", zap.Any("panic", r))
		}
	}()
	call(ctx)
}

// callAction runs the user's action, turning a panic into an error.
func (w *Watchdog) callAction(ctx context.Context, s *Session, v *VerdictError) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{r}
		}
	}()
	return w.action(ctx, s, v)
}

type panicError struct{ v any }

func (p *panicError) Error() string { return "watchdog: action panicked: " + fmtAny(p.v) }
