package watchdog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/record"
)

// actItem is an acting decision waiting for the configured action, or a
// user callback (call) of session s to run off the scheduler.
type actItem struct {
	s         *Session
	v         *VerdictError
	pre       decide.State // the rules' memory just before the decision
	call      func(ctx context.Context)
	noRecheck bool // a user liveness rule: its observation cannot be re-derived
}

// actor runs the configured action (WithAction) and user callbacks off the
// scheduler, one goroutine per session with some to run, in order (see the
// goroutines in ARCHITECTURE.md). Its queues are unbounded, so a slow
// action never blocks the scheduler.
type actor struct {
	w       *Watchdog
	mu      sync.Mutex
	lanes   map[*Session][]actItem // pending items of each session with a running goroutine
	running int                    // goroutines running
	idle    chan struct{}          // closed when running drops to 0; replaced when it rises
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
}

func newActor(w *Watchdog) *actor {
	ctx, cancel := context.WithCancel(context.Background())
	idle := make(chan struct{})
	close(idle)
	return &actor{w: w, lanes: make(map[*Session][]actItem), idle: idle, ctx: ctx, cancel: cancel}
}

// enqueue hands acting decisions and callbacks to their sessions'
// goroutines, starting those that are not running. It never blocks.
func (a *actor) enqueue(items []actItem) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	for _, it := range items {
		q, ok := a.lanes[it.s]
		a.lanes[it.s] = append(q, it)
		if ok {
			continue // its goroutine runs it after the items before it
		}
		if a.running == 0 {
			a.idle = make(chan struct{})
		}
		a.running++
		go a.runLane(it.s)
	}
}

// runLane runs session s's items until its queue is empty.
func (a *actor) runLane(s *Session) {
	for {
		a.mu.Lock()
		q := a.lanes[s]
		if len(q) == 0 || a.ctx.Err() != nil {
			delete(a.lanes, s)
			if a.running--; a.running == 0 {
				close(a.idle)
			}
			a.mu.Unlock()
			return
		}
		it := q[0]
		a.lanes[s] = q[1:]
		a.mu.Unlock()
		if it.call != nil {
			a.w.runCallback(a.ctx, it.call)
		} else {
			a.w.runAction(a.ctx, it)
		}
	}
}

// Barrier returns once no action or callback is pending or running (so
// every one queued before the call has finished), ErrStopped after close,
// or ctx's error.
func (a *actor) Barrier(ctx context.Context) error {
	for {
		a.mu.Lock()
		idle, stopped := a.idle, a.stopped
		a.mu.Unlock()
		if stopped {
			return record.ErrStopped
		}
		select {
		case <-idle:
			a.mu.Lock()
			done := a.running == 0
			a.mu.Unlock()
			if done {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop stops the actor and cancels the context of the running actions and
// callbacks; the channel it returns is closed once they have returned.
func (a *actor) stop() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.cancel()
	return a.idle
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
	sn, now := s.snapshot(now) // at the action's own instant
	sn.State = it.pre          // the rules' memory as it was just before the decision
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
		if s.rw().failed++; s.rare.failed == 1 {
			w.failingActions.Add(1)
		}
		backoff := actionBackoff(s.cfg.limits.SettleInterval, s.rare.failed)
		e := s.event(KindActionFailed, now)
		e.Rule, e.Reason, e.DecidedByDecisionID, e.Error = it.v.Rule, it.v.reason, it.v.DecisionID, cleanText(err.Error())
		failures := s.rare.failed
		e.Attempt, e.LimitSeconds = failures, backoff.Seconds()
		w.record(&ef, e)
		// The retry is the decision's last settle check again, after the backoff: a
		// rule still stale then acts at once, a fresh observation meanwhile clears it.
		pre := it.pre
		if pre.SettleDueAt = now.Add(backoff); it.noRecheck { // a liveness rule of the user's: its next stale report
			s.rare.liveness[it.v.Rule] = decide.LivenessState{Stale: s.cfg.limits.SettleChecks - 1, DueAt: pre.SettleDueAt}
		} else {
			s.setRules(pre)
		}
		due := toNanos(now.Add(backoff))
		w.heap.Push(&s.item, due)
		w.flushLocked(&ef)
		w.mu.Unlock()
		w.wakeBy(due)
		w.apply(&ef)
		w.log.Error("watchdog: action failed; the session keeps running and the rule is looked at again",
			zap.String("session_id", s.id), zap.String("rule", it.v.Rule),
			zap.String("decision_id", it.v.DecisionID), zap.Int("failures", failures),
			zap.Duration("retry_in", backoff), zap.Error(err))
		return
	}
	w.endLocked(s, it.v, sn, now, &ef)
	w.flushLocked(&ef)
	w.mu.Unlock()
	w.apply(&ef)
	w.log.Info("watchdog: session stopped by action", zap.String("session_id", s.id),
		zap.String("reason", it.v.reason), zap.String("decision_id", it.v.DecisionID))
}

// maxActionBackoff caps the wait before a failed action's rule is looked
// at again: a session whose action keeps failing records at most about six
// decisions (and six action_failed events) an hour once it is reached.
const maxActionBackoff = 10 * time.Minute

// actionBackoff is the wait before the rule is looked at again after the
// failed-th consecutive failure of its action: the settle interval,
// doubling with each failure, up to maxActionBackoff.
func actionBackoff(interval time.Duration, failed int) time.Duration {
	d := interval
	for i := 1; i < failed && d < maxActionBackoff; i++ {
		d *= 2
	}
	return min(d, maxActionBackoff)
}

// runCallback runs a user callback, logging a panic instead of crashing the
// Watchdog.
func (w *Watchdog) runCallback(ctx context.Context, call func(context.Context)) {
	defer func() {
		if r := recover(); r != nil {
			w.faults.recovered("watchdog: callback panicked", zap.Any("panic", r))
		}
	}()
	call(ctx)
}

// callAction runs the user's action, turning a panic into an error.
func (w *Watchdog) callAction(ctx context.Context, s *Session, v *VerdictError) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.faults.n.Add(1) // logged as the action's failure
			err = &panicError{r}
		}
	}()
	return w.action(ctx, s, v)
}

type panicError struct{ v any }

func (p *panicError) Error() string { return "watchdog: action panicked: " + fmt.Sprint(p.v) }
