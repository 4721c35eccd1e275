package watchdog

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// ReasonLivenessFailed is the reason of a verdict of a liveness rule of your
// own (see Session.ReportLiveness).
const ReasonLivenessFailed = "liveness_failed"

// StopLivenessFailed is the stop reason code of a window ended by a
// liveness rule of your own.
const StopLivenessFailed = "watchdog_liveness_failed"

// livenessState is the settle memory of one user liveness rule.
type livenessState struct {
	stale   int
	dueAt   time.Time
	advised bool
}

// ReportLiveness records one observation of a liveness rule of your own (a
// health probe, a progress check, a heartbeat from another system) declared in
// Policy.LivenessRules: stale or not. The rule follows the supervisor
// discipline of the idle rule: it acts after Policy.SettleChecks consecutive
// stale observations, counted at most once per Policy.SettleInterval; one
// fresh observation resets the count, so a recovering session is never killed.
// Each stale observation that does not act yet is recorded as a
// runtime.watchdog.verdict (settle_count of settle_checks). Its mode is
// Policy.RuleModes[rule] (default Policy.Mode): in shadow mode the decision is
// recorded once until a fresh observation, and nothing else happens; in act
// mode the decision is recorded, then the session is cancelled with a
// *VerdictError (Rule: rule, Reason: ReasonLivenessFailed, errors.Is
// ErrLivenessFailed, recoverable) or the configured action runs, then the
// outcome is recorded.
//
// It reports whether this observation made the rule decide. It returns an
// error wrapping ErrInvalidArgument for an undeclared rule, and the window's
// end cause if it has ended. Safe for concurrent use.
func (s *Session) ReportLiveness(rule string, stale bool) (decided bool, err error) {
	declared := false
	for _, r := range s.cfg.policy.LivenessRules {
		declared = declared || r == rule
	}
	if !declared {
		return false, fmt.Errorf("%w: session %q: liveness rule %q is not declared in the policy's liveness_rules", ErrInvalidArgument, s.id, rule)
	}
	w := s.w
	now := w.clock.Now()
	var fired *firing
	var act *actItem
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		return false, cause
	}
	r := s.rw()
	if r.liveness == nil {
		r.liveness = make(map[string]*livenessState)
	}
	st := r.liveness[rule]
	if st == nil {
		st = &livenessState{}
		r.liveness[rule] = st
	}
	switch {
	case !stale:
		*st = livenessState{}
	case st.advised || r.acting || (!st.dueAt.IsZero() && now.Before(st.dueAt)):
		// already advised for this episode, being acted on, or too early
		// to count: the settle interval spaces the observations
	default:
		st.stale++
		st.dueAt = now.Add(s.cfg.limits.SettleInterval)
		sn := s.snapshot()
		if st.stale < s.cfg.limits.SettleChecks {
			e := w.event(s, KindVerdict, now)
			e.Verdict, e.Rule, e.ActiveChannel = VerdictContinue, rule, "none"
			e.SettleCount, e.SettleChecks = st.stale, s.cfg.limits.SettleChecks
			e.EvidenceSummary = s.summary(sn, now)
			w.rec.enqueue(e)
			break
		}
		decided = true
		mode := s.cfg.policy.modeOf(rule)
		dec := w.event(s, KindDecision, now)
		dec.Verdict, dec.Rule, dec.Mode, dec.Reason = VerdictHardStop, rule, mode, ReasonLivenessFailed
		recoverable := true
		dec.Recoverable = &recoverable
		dec.SettleCount, dec.SettleChecks = st.stale, s.cfg.limits.SettleChecks
		dec.EvidenceSummary = s.summary(sn, now)
		dec.ActiveChannel = "none"
		w.rec.enqueue(dec)
		if mode == ModeShadow {
			st.advised = true
			break
		}
		*st = livenessState{}
		ve := &VerdictError{SessionID: s.id, Window: int(s.window), Rule: rule, Reason: ReasonLivenessFailed,
			FiredAt: now.UTC(), Recoverable: true, DecisionID: dec.ID, Evidence: dec.EvidenceSummary,
			Elapsed: now.Sub(s.windowStartedAt), Budget: s.cfg.limits.WallClock}
		if w.action == nil {
			w.endLocked(s, ve, sn, dec.EvidenceSummary, now)
			fired = &firing{s, ve}
			break
		}
		r.acting = true
		w.heap.Remove(&s.item)
		act = &actItem{s: s, v: ve, noRecheck: true}
	}
	w.mu.Unlock()
	if fired != nil {
		fired.s.cancel(fired.v)
		w.log.Info("watchdog: session cancelled by a liveness rule", zap.String("session_id", s.id), zap.String("rule", rule))
	}
	if act != nil {
		w.act.enqueue([]actItem{*act})
	}
	return decided, nil
}
