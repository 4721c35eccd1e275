package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// Recovery defaults (Policy.RecoveryBudget, Policy.RecoveryBackoff).
const (
	defaultRecoveryBudget  = 2
	defaultRecoveryBackoff = time.Second
)

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
// runtime.watchdog.recovery_budget_exceeded event is recorded.
//
// RunPhase returns the last partial result fn returned (kept across
// attempts), how many times fn ran, and nil on success; otherwise the error
// that ended the phase: one wrapping ErrRecoveryBudgetExceeded and the last
// failure when the retries ran out, the session's cause (a *VerdictError,
// ErrSessionStopped, ...) when the session ended, or fn's own error.
func RunPhase[T any](s *Session, name string, budget time.Duration, fn func(ctx context.Context, attempt int) (partial T, err error)) (partial T, attempts int, err error) {
	if s == nil {
		return partial, 0, fmt.Errorf("%w: phase %q: nil session", ErrInvalidArgument, name)
	}
	if err := checkName("phase name", name); err != nil {
		return partial, 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if fn == nil {
		return partial, 0, fmt.Errorf("%w: phase %q: nil function", ErrInvalidArgument, name)
	}
	if budget == 0 {
		budget = s.cfg.policy.PhaseBudgets[name]
	}
	if budget < 0 {
		return partial, 0, fmt.Errorf("%w: phase %q: negative budget %v", ErrInvalidArgument, name, budget)
	}
	w := s.w
	retries := 0
	for attempt := 1; ; attempt++ {
		attempts = attempt
		actx, cancel := context.WithCancelCause(&s.ctx)
		at := &phaseAttempt{cancel: cancel}
		now := w.now()
		w.mu.Lock()
		if s.r().attempt != nil {
			w.mu.Unlock()
			cancel(nil)
			return partial, attempts, fmt.Errorf("%w: session %q: phase %q: another RunPhase is running on this session", ErrInvalidArgument, s.id, name)
		}
		s.rw().attempt = at
		s.rare.backingOff = false
		if attempt > 1 {
			// Each attempt gets a whole idle window.
			s.since = toNanos(now)
		}
		w.mu.Unlock()
		var pmu sync.Mutex
		over := false // set when the attempt is over: a late write is dropped
		run := func(ctx context.Context) error {
			p, err := fn(ctx, attempt)
			pmu.Lock()
			if !over {
				partial = p
			}
			pmu.Unlock()
			return err
		}
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
			return partial, attempts, nil
		}
		var v *VerdictError
		if !errors.As(err, &v) {
			errors.As(cause, &v)
		}
		if v == nil || !v.Recoverable || s.ctx.Err() != nil {
			if c := context.Cause(&s.ctx); c != nil {
				err = c
			}
			return partial, attempts, err
		}
		// Time the retry from the verdict's instant, not from now, so that
		// a fake clock gives the same log and schedule on every run.
		failedAt := w.fromRecord(v.FiredAt)
		if v.FiredAt.IsZero() {
			failedAt = w.now()
		}
		retry, backoff := decide.Retry(retries, s.cfg.recoveryBudget, s.cfg.recoveryBackoff)
		if !retry {
			e := s.event(KindRecoveryBudgetExceeded, failedAt)
			e.Handler, e.Layer, e.Attempt, e.Reason = name, string(LayerPhase), attempt, v.reason
			w.record(nil, e)
			return partial, attempts, fmt.Errorf("%w: phase %q after %d attempts: %w", ErrRecoveryBudgetExceeded, name, attempt, v)
		}
		retries++
		e := s.event(KindRetry, failedAt)
		e.Handler, e.Layer, e.Attempt, e.Reason = name, string(LayerPhase), attempt+1, v.reason
		e.LimitSeconds = backoff.Seconds()
		w.record(nil, e)
		w.log.Info("watchdog: retrying phase", zap.String("session_id", s.id), zap.String("phase", name),
			zap.Int("attempt", attempt+1), zap.String("reason", v.reason), zap.Duration("backoff", backoff))
		w.mu.Lock()
		s.rw().backingOff = true // waiting to retry is not idleness
		w.mu.Unlock()
		err = w.sleepUntil(&s.ctx, failedAt.Add(backoff))
		w.mu.Lock()
		s.rare.backingOff = false
		w.mu.Unlock()
		if err != nil {
			return partial, attempts, err
		}
	}
}

// phaseAttempt is a running RunPhase attempt: a recoverable idle verdict
// cancels it instead of the session.
type phaseAttempt struct {
	cancel context.CancelCauseFunc
}

// sleeper is a wake-up on the scheduler (deterministic on a fake clock).
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
	if !t.After(w.now()) {
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
	w.wakeBy(due)
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
