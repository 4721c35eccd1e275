package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// Layer names a level of deadline under the session: phase > iteration >
// handler. Layers nest through contexts; the innermost deadline wins and the
// cause names the layer that fired.
type Layer string

// The layers.
const (
	LayerPhase     Layer = "phase"
	LayerIteration Layer = "iteration"
	LayerHandler   Layer = "handler"
)

// DefaultHandlerGrace is how long a layer waits, after its deadline, for fn
// to return before it abandons it (Policy.HandlerGrace).
const DefaultHandlerGrace = 5 * time.Second

// layer is one deadline layer in flight.
type layer struct {
	w        *Watchdog // nil without a session: real timers, no events
	s        *Session
	kind     Layer
	name     string
	budget   time.Duration
	grace    time.Duration
	started  time.Time
	deadline time.Time
	cancel   context.CancelCauseFunc
	step     atomic.Pointer[string]
	item     sched.Item[timed]
	parent   *layer        // the enclosing layer, if any
	abandon  chan struct{} // closed when the caller gives up on fn

	mu            sync.Mutex // guards abandonedFlag and exitedFlag; and the fields below when w is nil (else w.mu does)
	abandonedFlag bool
	exitedFlag    bool
	state         int // layerRunning, layerFired, layerDone
	cause         error
	event         *Event
	timers        [2]*time.Timer // without a Watchdog
}

const (
	layerRunning = iota
	layerFired
	layerDone
)

type layerKey struct{}

func layerFrom(ctx context.Context) *layer {
	l, _ := ctx.Value(layerKey{}).(*layer)
	return l
}

// Step marks the step name as running in ctx's innermost deadline layer until
// the returned func is called; if the layer's deadline fires meanwhile, its
// event and error name that step as dying_span. Steps nest: ending one
// restores the step around it. Outside any layer it does nothing.
func Step(ctx context.Context, name string) (end func()) {
	l := layerFrom(ctx)
	if l == nil {
		return func() {}
	}
	p := &name
	prev := l.step.Swap(p)
	return func() { l.step.CompareAndSwap(p, prev) }
}

// Call runs fn as the handler name under budget: Within(ctx, LayerHandler,
// name, budget, fn).
func Call(ctx context.Context, name string, budget time.Duration, fn func(ctx context.Context) error) error {
	return Within(ctx, LayerHandler, name, budget, fn)
}

// Within runs fn under a deadline layer of kind layer, named name, with its
// own budget carried in fn's context. The context is done at start + budget
// with a *VerdictError cause naming the layer (errors.Is matches
// ErrHandlerDeadlineExceeded, ErrIterationDeadlineExceeded or
// ErrPhaseDeadlineExceeded). The host enforces it: if fn has not returned
// within the grace period after the deadline (the session policy's
// HandlerGrace, default DefaultHandlerGrace), Within returns the deadline
// error anyway and abandons fn's goroutine, which is counted (see
// Watchdog.AbandonedHandlers) and recorded, never silently leaked. If fn
// returns after the deadline, Within returns the deadline error too.
// Otherwise it returns fn's error. A panic in fn is re-raised in the caller.
//
// When ctx belongs to a watched session (it derives from Session.Context),
// the deadline runs on the Watchdog's clock and scheduler (deterministic on a
// fake clock), every overrun is recorded as a runtime.handler.deadline_exceeded
// event naming the dying step, and, for LayerHandler, the in-flight handler is
// bounded work that the idle rule waits for, and its start and its end are
// recorded as ChannelMCPTool evidence. Without a session it runs on the
// real clock and records nothing.
//
// A zero budget means the session policy's (PhaseBudgets[name] for a phase,
// IterationBudget for an iteration). A budget that is still <= 0, or a nil
// fn, is an error wrapping ErrInvalidArgument.
func Within(ctx context.Context, kind Layer, name string, budget time.Duration, fn func(ctx context.Context) error) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if s := FromContext(ctx); s != nil && budget == 0 {
		switch kind {
		case LayerPhase:
			budget = s.cfg.policy.PhaseBudgets[name]
		case LayerIteration:
			budget = s.cfg.policy.IterationBudget
		}
	}
	switch {
	case fn == nil:
		return fmt.Errorf("%w: %s %q: nil function", ErrInvalidArgument, kind, name)
	case budget <= 0:
		return fmt.Errorf("%w: %s %q: budget %v must be positive", ErrInvalidArgument, kind, name, budget)
	case kind != LayerPhase && kind != LayerIteration && kind != LayerHandler:
		return fmt.Errorf("%w: unknown layer %q", ErrInvalidArgument, kind)
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	l := &layer{kind: kind, name: name, budget: budget, grace: DefaultHandlerGrace, abandon: make(chan struct{})}
	l.item.Value = l
	s := FromContext(ctx)
	var obs Observer
	if s != nil {
		l.w, l.s, l.grace, obs = s.w, s, s.cfg.grace, s.w.obs
	}
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, layerKey{}, l))
	defer cancel(nil)
	l.cancel = cancel
	l.parent = layerFrom(ctx)
	if s != nil && kind == LayerHandler {
		s.Touch(ChannelMCPTool) // a handler call is tool-call evidence
	}
	l.arm()
	if obs.OnHandlerStart != nil {
		if c := obs.OnHandlerStart(lctx, kind, name, l.remaining()); c != nil {
			lctx = c
		}
	}

	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			l.exited()
			done <- r
		}()
		r.err = fn(lctx)
	}()

	var err error
	select {
	case r := <-done:
		if r.panic != nil {
			l.finish()
			if obs.OnHandlerEnd != nil {
				obs.OnHandlerEnd(lctx, kind, name, fmt.Errorf("watchdog: %s %q panicked: %v", kind, name, r.panic), l.overrunEvent())
			}
			panic(r.panic)
		}
		err = r.err
		if fired := l.finish(); fired != nil {
			err = fired
		}
	case <-l.abandon:
		err = l.abandonedCause()
	}
	if obs.OnHandlerEnd != nil {
		obs.OnHandlerEnd(lctx, kind, name, err, l.overrunEvent())
	}
	return err
}

// remaining is the time left from the layer's start until the earliest of
// its own deadline, its enclosing layers' and the session window's.
func (l *layer) remaining() time.Duration {
	end := l.deadline
	for p := l.parent; p != nil; p = p.parent {
		if p.deadline.Before(end) {
			end = p.deadline
		}
	}
	if l.s != nil {
		if d := l.s.Deadline(); d.Before(end) {
			end = d
		}
	}
	return end.Sub(l.started)
}

// arm schedules the layer's deadline.
func (l *layer) arm() {
	w := l.w
	if w == nil {
		l.started = time.Now()
		l.deadline = l.started.Add(l.budget)
		l.timers[0] = time.AfterFunc(l.budget, func() { l.fireReal() })
		return
	}
	l.started = w.clock.Now()
	l.deadline = l.started.Add(l.budget)
	due := toNanos(l.deadline)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		l.state = layerDone
		l.cause = ErrClosed
		l.cancel(ErrClosed)
		close(l.abandon)
		return
	}
	w.layers[l] = struct{}{}
	if l.kind == LayerHandler && l.s.state.Load() == stateRunning {
		r := l.s.rw()
		r.bounded = append(r.bounded, l)
	}
	w.heap.Push(&l.item, due)
	w.mu.Unlock()
	w.armIfEarlier(due)
}

// verdict builds the layer's overrun verdict at now.
func (l *layer) verdict(now time.Time) *VerdictError {
	v := &VerdictError{
		Rule:    string(l.kind) + "_deadline",
		Reason:  string(l.kind) + "_deadline_exceeded",
		Layer:   l.kind,
		Name:    l.name,
		Elapsed: now.Sub(l.started),
		Budget:  l.budget,
		FiredAt: now.UTC(),
		// A handler or iteration overrun may be retried by a recovery
		// layer; a phase overrun ends the phase.
		Recoverable: l.kind != LayerPhase,
	}
	if p := l.step.Load(); p != nil {
		v.DyingSpan = *p
	}
	if l.s != nil {
		v.SessionID, v.Window = l.s.id, int(l.s.window)
	}
	return v
}

// fireLocked handles the deadline (state running) or the end of the grace
// period (state fired). Called by the scheduler with w.mu held.
func (l *layer) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	switch l.state {
	case layerRunning:
		v := l.verdict(now)
		l.state, l.cause = layerFired, v
		e := l.s.event(KindHandlerDeadline, now)
		e.ID = w.newID()
		e.Reason, e.Rule = v.Reason, v.Rule
		e.Handler, e.Layer, e.DyingSpan = l.name, string(l.kind), v.DyingSpan
		e.MeasureSeconds, e.LimitSeconds = v.Elapsed.Seconds(), v.Budget.Seconds()
		rec := v.Recoverable
		e.Recoverable = &rec
		l.event = &e
		v.DecisionID = e.ID
		w.recordLocked(ef, e)
		w.heap.Push(&l.item, toNanos(now.Add(l.grace)))
		ef.after = append(ef.after, func() {
			l.cancel(v)
			w.log.Warn("watchdog: deadline exceeded", zap.String("session_id", v.SessionID),
				zap.String("layer", string(l.kind)), zap.String("name", l.name),
				zap.String("dying_span", v.DyingSpan), zap.Duration("budget", l.budget))
		})
	case layerFired:
		l.state = layerDone
		w.unregisterLocked(l)
		w.abandoned.Add(1)
		l.markAbandoned()
		e := l.s.event(KindHandlerAbandoned, now)
		e.Reason, e.Handler, e.Layer = l.cause.(*VerdictError).Reason, l.name, string(l.kind)
		e.DyingSpan = l.cause.(*VerdictError).DyingSpan
		e.MeasureSeconds, e.LimitSeconds = now.Sub(l.started).Seconds(), (l.budget + l.grace).Seconds()
		w.recordLocked(ef, e)
		ef.after = append(ef.after, func() {
			close(l.abandon)
			w.log.Error("watchdog: handler ignored its deadline and was abandoned", zap.String("session_id", l.s.id),
				zap.String("layer", string(l.kind)), zap.String("name", l.name), zap.Duration("grace", l.grace))
		})
	}
}

// unregisterLocked removes l from the Watchdog's and the session's books and
// re-examines the session if the idle rule was waiting for it. Called with
// w.mu held.
func (w *Watchdog) unregisterLocked(l *layer) {
	delete(w.layers, l)
	w.heap.Remove(&l.item)
	s := l.s
	r := s.r()
	for i, b := range r.bounded {
		if b == l { // r is s.rare: r.bounded is not empty
			r.bounded = append(r.bounded[:i], r.bounded[i+1:]...)
			if s.state.Load() == stateRunning && !r.acting {
				// The idle rule may have been deferring for this handler.
				w.pullInLocked(s, toNanos(w.clock.Now()))
			}
			break
		}
	}
}

// finish marks the layer done after fn returned and reports the deadline
// error if the deadline had fired.
func (l *layer) finish() error {
	w := l.w
	if w == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, t := range l.timers {
			if t != nil {
				t.Stop()
			}
		}
		st := l.state
		l.state = layerDone
		if st == layerFired {
			return l.cause
		}
		return nil
	}
	if l.kind == LayerHandler {
		// Its completion is evidence too, recorded before the idle rule
		// looks again, so that the instant a tool returns is not taken
		// for silence (with deferral on).
		l.s.Touch(ChannelMCPTool)
	}
	w.mu.Lock()
	st := l.state
	if st != layerDone {
		l.state = layerDone
		w.unregisterLocked(l)
	}
	cause := l.cause
	w.mu.Unlock()
	w.rearm()
	if st == layerFired || (st == layerDone && cause != nil) {
		return cause
	}
	return nil
}

func (l *layer) abandonedCause() error {
	if l.w == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cause
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.cause
}

func (l *layer) overrunEvent() *Event {
	if l.w == nil {
		return nil
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.event
}

// fireReal and graceReal are the deadline and grace of a layer without a
// Watchdog, on real timers.
func (l *layer) fireReal() {
	l.mu.Lock()
	if l.state != layerRunning {
		l.mu.Unlock()
		return
	}
	v := l.verdict(time.Now())
	l.state, l.cause = layerFired, v
	l.timers[1] = time.AfterFunc(l.grace, l.graceReal)
	l.mu.Unlock()
	l.cancel(v)
}

func (l *layer) graceReal() {
	l.mu.Lock()
	if l.state != layerFired {
		l.mu.Unlock()
		return
	}
	l.state = layerDone
	l.mu.Unlock()
	close(l.abandon)
}

// markAbandoned and exited keep Watchdog.running, the count of abandoned
// functions still running, exact whichever comes first.
func (l *layer) markAbandoned() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.abandonedFlag = true
	if !l.exitedFlag && l.w != nil {
		l.w.running.Add(1)
	}
}

func (l *layer) exited() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exitedFlag = true
	if l.abandonedFlag && l.w != nil {
		l.w.running.Add(-1)
	}
}

// AbandonedHandlers returns how many functions were abandoned because they
// ignored their deadline past the grace period, and how many of those are
// still running.
func (w *Watchdog) AbandonedHandlers() (abandoned, stillRunning int64) {
	return w.abandoned.Load(), w.running.Load()
}

// DefaultWaitTimeout is the timeout of a waiting state whose server supplied
// none (0) or a negative one.
const DefaultWaitTimeout = 30 * time.Minute

// WaitTimeout resolves a server-supplied timeout: a positive value is used as
// is; 0 (unset) or a negative value falls back to DefaultWaitTimeout.
func WaitTimeout(server time.Duration) time.Duration {
	if server > 0 {
		return server
	}
	return DefaultWaitTimeout
}

// waiter is a session's armed waiting watchdog.
type waiter struct {
	s    *Session
	gen  uint64
	item sched.Item[timed]
	fn   func(ctx context.Context, s *Session, generation uint64)
	from time.Time
	d    time.Duration
}

// Wait puts the session in the waiting state (waiting for external events)
// and arms the waiting watchdog for WaitTimeout(timeout). It returns the
// arm's generation. Each arm supersedes the previous one; EndWait and the
// end of the window bump the generation, so a stale timer never fires. While
// waiting, the idle rule does not fire (the wall clock and the ceilings
// still do).
//
// On fire the session is NOT cancelled: the Watchdog records a
// runtime.watchdog.wait_timeout verdict, leaves the waiting state, and calls
// onTimeout exactly once, on its action goroutine (for example to emit a
// synthetic result into the agent's next turn), unless Close comes first.
// onTimeout may be nil; it must not call Check or Close.
func (s *Session) Wait(timeout time.Duration, onTimeout func(ctx context.Context, s *Session, generation uint64)) uint64 {
	w := s.w
	d := WaitTimeout(timeout)
	now := w.clock.Now()
	w.mu.Lock()
	r := s.rw()
	if r.waiter != nil {
		w.heap.Remove(&r.waiter.item)
	}
	s.gen++
	gen := s.gen
	if s.state.Load() != stateRunning {
		r.waiter = nil
		w.mu.Unlock()
		return gen
	}
	wt := &waiter{s: s, gen: gen, fn: onTimeout, from: now, d: d}
	wt.item.Value = wt
	r.waiter = wt
	due := toNanos(now.Add(d))
	w.heap.Push(&wt.item, due)
	w.mu.Unlock()
	w.armIfEarlier(due)
	return gen
}

// EndWait leaves the waiting state (the conversation is back in progress):
// it bumps the generation, so the armed timer can no longer fire, and the
// idle rule applies again from now. It reports whether the session was
// waiting.
func (s *Session) EndWait() bool {
	w := s.w
	now := w.clock.Now()
	w.mu.Lock()
	s.gen++
	was := s.r().waiter != nil
	if was {
		w.heap.Remove(&s.rare.waiter.item)
		s.rare.waiter = nil
		s.since = toNanos(now) // silence while waiting is not idleness
		if s.state.Load() == stateRunning && !s.r().acting {
			w.pullInLocked(s, toNanos(now))
		}
	}
	w.mu.Unlock()
	if was {
		w.armIfEarlier(toNanos(now))
	}
	return was
}

// Waiting reports whether the session is in the waiting state, and the
// current generation.
func (s *Session) Waiting() (bool, uint64) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.r().waiter != nil, s.gen
}

func (wt *waiter) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	s := wt.s
	if s.r().waiter != wt || s.gen != wt.gen || s.state.Load() != stateRunning {
		return // superseded: a stale timer never fires
	}
	s.rare.waiter = nil
	s.since = toNanos(now)
	e := s.event(KindWaitTimeout, now)
	e.Verdict, e.Reason, e.Generation = VerdictContinue, "wait_timeout", wt.gen
	e.MeasureSeconds, e.LimitSeconds = now.Sub(wt.from).Seconds(), wt.d.Seconds()
	w.recordLocked(ef, e)
	if !s.r().acting {
		w.pullInLocked(s, toNanos(now))
	}
	if wt.fn != nil {
		fn, gen := wt.fn, wt.gen
		ef.acts = append(ef.acts, actItem{call: func(ctx context.Context) { fn(ctx, s, gen) }})
	}
}

// Recovery defaults (Policy.RecoveryBudget, Policy.RecoveryBackoff).
const (
	DefaultRecoveryBudget  = 2
	DefaultRecoveryBackoff = time.Second
	// NoRetries, as Policy.RecoveryBudget, turns retries off.
	NoRetries = -1
)

// StopRecoveryBudgetExceeded is the stop reason code of a phase whose
// recoverable failures outlasted its recovery budget.
const StopRecoveryBudgetExceeded = "recovery_budget_exceeded"

// PhaseResult is how RunPhase ended.
type PhaseResult[T any] struct {
	// Phase is the phase's name.
	Phase string
	// Attempts is how many times fn ran.
	Attempts int
	// StopReasonCode is "" on success, StopRecoveryBudgetExceeded when
	// the retries ran out, or the code of the unrecoverable verdict (for
	// example "phase_deadline_exceeded") or StopFailed.
	StopReasonCode string
	// Partial is the last result fn returned, kept across attempts.
	Partial T
}

// RunPhase runs fn as the phase name of session s (one RunPhase at a time per
// session; a second concurrent one is refused), with recovery: fn runs
// under the phase's budget (budget, or the policy's PhaseBudgets[name] when
// budget is 0; no phase deadline if both are 0), and an attempt that ends
// with a recoverable verdict (the idle rule, a handler or iteration deadline)
// is retried up to the policy's RecoveryBudget times, with exponential
// backoff from RecoveryBackoff on the Watchdog's clock. While an attempt
// runs, an idle verdict cancels the attempt (fn's context), not the session.
// The wall clock, the ceilings and a phase deadline are never retried. Every
// retry is recorded (runtime.watchdog.retry); when the budget is spent a
// runtime.watchdog.recovery_budget_exceeded event is recorded and RunPhase
// returns StopRecoveryBudgetExceeded with the last partial result and an
// error wrapping ErrRecoveryBudgetExceeded and the last failure.
func RunPhase[T any](s *Session, name string, budget time.Duration, fn func(ctx context.Context, attempt int) (partial T, err error)) (PhaseResult[T], error) {
	res := PhaseResult[T]{Phase: name}
	if fn == nil {
		return res, fmt.Errorf("%w: phase %q: nil function", ErrInvalidArgument, name)
	}
	if budget == 0 {
		budget = s.cfg.policy.PhaseBudgets[name]
	}
	if budget < 0 {
		return res, fmt.Errorf("%w: phase %q: negative budget %v", ErrInvalidArgument, name, budget)
	}
	w := s.w
	retries := 0
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		actx, cancel := context.WithCancelCause(s.ctx)
		at := &phaseAttempt{cancel: cancel}
		w.mu.Lock()
		if s.r().attempt != nil {
			w.mu.Unlock()
			cancel(nil)
			return res, fmt.Errorf("%w: session %q: phase %q: another RunPhase is running on this session", ErrInvalidArgument, s.id, name)
		}
		s.rw().attempt = at
		s.rare.backingOff = false
		if attempt > 1 {
			// Each attempt gets a whole idle window.
			s.since = toNanos(w.clock.Now())
		}
		w.mu.Unlock()
		var pmu sync.Mutex
		over := false // set when the attempt is over: a late write is dropped
		run := func(ctx context.Context) error {
			p, err := fn(ctx, attempt)
			pmu.Lock()
			if !over {
				res.Partial = p
			}
			pmu.Unlock()
			return err
		}
		var err error
		if budget > 0 {
			err = Within(actx, LayerPhase, name, budget, run)
		} else {
			err = run(actx)
		}
		pmu.Lock()
		over = true
		pmu.Unlock()
		w.mu.Lock()
		if r := s.r(); r.attempt == at {
			r.attempt = nil // r is s.rare: set above
		}
		w.mu.Unlock()
		cause := context.Cause(actx)
		cancel(nil)
		if err == nil {
			return res, nil
		}
		var v *VerdictError
		if !errors.As(err, &v) {
			errors.As(cause, &v)
		}
		if v == nil || !v.Recoverable || s.ctx.Err() != nil {
			res.StopReasonCode = StopFailed
			if v != nil {
				res.StopReasonCode = v.StopReasonCode()
			}
			if c := context.Cause(s.ctx); c != nil {
				err = c
				var sv *VerdictError
				if errors.As(c, &sv) {
					res.StopReasonCode = sv.StopReasonCode()
				}
			}
			return res, err
		}
		// Time the retry from the verdict's instant, not from when this
		// goroutine got here, so that a fake clock gives the same log and
		// the same schedule on every run.
		failedAt := v.FiredAt
		if failedAt.IsZero() {
			failedAt = w.clock.Now()
		}
		budgetN := s.cfg.recoveryBudget
		if retries >= budgetN {
			e := s.event(KindRecoveryBudgetExceeded, failedAt)
			e.Phase, e.Attempt, e.Reason, e.StopReasonCode = name, attempt, v.Reason, StopRecoveryBudgetExceeded
			w.recordNow(e)
			res.StopReasonCode = StopRecoveryBudgetExceeded
			return res, fmt.Errorf("%w: phase %q after %d attempts: %w", ErrRecoveryBudgetExceeded, name, attempt, v)
		}
		retries++
		backoff := s.cfg.recoveryBackoff << min(retries-1, 20)
		e := s.event(KindRetry, failedAt)
		e.Phase, e.Attempt, e.Reason = name, attempt+1, v.Reason
		e.LimitSeconds = backoff.Seconds()
		w.recordNow(e)
		w.log.Info("watchdog: retrying phase", zap.String("session_id", s.id), zap.String("phase", name),
			zap.Int("attempt", attempt+1), zap.String("reason", v.Reason), zap.Duration("backoff", backoff))
		w.mu.Lock()
		s.rw().backingOff = true // waiting to retry is not idleness
		w.mu.Unlock()
		err = w.sleepUntil(s.ctx, failedAt.Add(backoff))
		w.mu.Lock()
		s.rare.backingOff = false
		w.mu.Unlock()
		if err != nil {
			res.StopReasonCode = StopCanceled
			var sv *VerdictError
			if errors.As(err, &sv) {
				res.StopReasonCode = sv.StopReasonCode()
			}
			return res, err
		}
	}
}

// phaseAttempt is a running RunPhase attempt: a recoverable idle verdict
// cancels it instead of the session.
type phaseAttempt struct {
	cancel context.CancelCauseFunc
}

// sleeper is a wake-up on the Watchdog's scheduler (deterministic on a fake
// clock).
type sleeper struct {
	item sched.Item[timed]
	ch   chan struct{}
}

func (sl *sleeper) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	ef.after = append(ef.after, func() { close(sl.ch) })
}

// sleepUntil waits until t on the Watchdog's clock, or until ctx ends. It
// returns at once if t has passed.
func (w *Watchdog) sleepUntil(ctx context.Context, t time.Time) error {
	if !t.After(w.clock.Now()) {
		return context.Cause(ctx)
	}
	sl := &sleeper{ch: make(chan struct{})}
	sl.item.Value = sl
	due := toNanos(t)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.heap.Push(&sl.item, due)
	w.mu.Unlock()
	w.armIfEarlier(due)
	select {
	case <-sl.ch:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		w.heap.Remove(&sl.item)
		w.mu.Unlock()
		return context.Cause(ctx)
	case <-w.done:
		return ErrClosed
	}
}
