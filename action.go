package watchdog

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/record"
)

// actItem is an acting decision waiting for the configured action, or a
// user callback (call) to run off the scheduler.
type actItem struct {
	s         *Session
	v         *VerdictError
	pre       decide.State // the rules' memory just before the decision
	call      func(ctx context.Context)
	noRecheck bool // a user liveness rule: its observation cannot be re-derived
}

// actor runs the configured action (WithAction) and user callbacks on its own
// goroutine, one at a time. Its queue is unbounded, so a slow action never
// blocks the scheduler.
type actor struct {
	record.Worker
	w       *Watchdog
	mu      sync.Mutex
	pending []actItem
	ctx     context.Context
	cancel  context.CancelFunc
}

func newActor(w *Watchdog) *actor {
	ctx, cancel := context.WithCancel(context.Background())
	return &actor{Worker: record.NewWorker(), w: w, ctx: ctx, cancel: cancel}
}

// enqueue hands acting decisions to the action goroutine. It never blocks.
func (a *actor) enqueue(items []actItem) {
	a.mu.Lock()
	a.pending = append(a.pending, items...)
	a.mu.Unlock()
	a.Poke()
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
			if a.ctx.Err() != nil {
				return
			}
			if it.call != nil {
				a.w.runCallback(a.ctx, it.call)
				continue
			}
			a.w.runAction(a.ctx, it)
		}
	}
}

func (a *actor) run() { a.Loop(a.drain) }

// close stops the action goroutine: it cancels the context of a running
// action or callback and waits for it to return, until ctx ends.
func (a *actor) close(ctx context.Context) error {
	a.cancel()
	if err := a.StopWithin(ctx); err != nil {
		return fmt.Errorf("watchdog: close: an action or callback ignores its context and is still running: %w", err)
	}
	return nil
}

// runAction re-derives the verdict at the action's own instant, runs the
// configured action if it still acts, and records the outcome.
func (w *Watchdog) runAction(ctx context.Context, it actItem) {
	s := it.s
	var ef effects
	now := w.now()
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
		e := s.event(KindSuperseded, now)
		e.Rule, e.Reason, e.DecidedByDecisionID = it.v.Rule, it.v.reason, it.v.DecisionID
		e.EvidenceSummary = s.summary(sn, now)
		w.record(&ef, e)
		// Then decide afresh, as the scheduler would: a Continue is
		// rescheduled, a shadow rule advises, another rule may act.
		s.setRules(it.pre)
		w.decideLocked(s, now, &ef)
		w.flushLocked(&ef)
		w.mu.Unlock()
		w.wakeBy(toNanos(now) + 1)
		w.apply(&ef)
		w.log.Info("watchdog: decision superseded by fresh evidence", zap.String("session_id", s.id),
			zap.String("rule", it.v.Rule), zap.String("decision_id", it.v.DecisionID))
		return
	}
	w.mu.Unlock()

	err := w.callAction(ctx, s, it.v)

	now = w.now()
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		w.mu.Unlock()
		return
	}
	s.clearActing()
	if err != nil {
		e := s.event(KindActionFailed, now)
		e.Rule, e.Reason, e.DecidedByDecisionID, e.Error = it.v.Rule, it.v.reason, it.v.DecisionID, err.Error()
		w.record(&ef, e)
		due := toNanos(now.Add(s.cfg.limits.SettleInterval))
		w.heap.Push(&s.item, due)
		w.flushLocked(&ef)
		w.mu.Unlock()
		w.wakeBy(due)
		w.apply(&ef)
		w.log.Error("watchdog: action failed; the session keeps running and the rule is looked at again",
			zap.String("session_id", s.id), zap.String("rule", it.v.Rule),
			zap.String("decision_id", it.v.DecisionID), zap.Error(err))
		return
	}
	w.endLocked(s, it.v, sn, now, &ef)
	w.flushLocked(&ef)
	w.mu.Unlock()
	w.apply(&ef)
	w.log.Info("watchdog: session stopped by action", zap.String("session_id", s.id),
		zap.String("reason", it.v.reason), zap.String("decision_id", it.v.DecisionID))
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
