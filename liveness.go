package watchdog

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// ReportLiveness records one observation, stale or not, of a liveness rule
// of your own (a health probe, a progress check, a heartbeat from another
// system) declared in Policy.LivenessRules. The rule follows the idle rule's
// discipline: it acts after Policy.SettleChecks consecutive stale
// observations, counted at most once per Policy.SettleInterval; one fresh
// observation resets the count, so a recovering session is never killed.
// Each stale observation that does not act yet is recorded as a
// runtime.watchdog.verdict (settle_count of settle_checks). Its mode is
// Policy.RuleModes[rule] (default Policy.Mode): in shadow mode the decision
// is recorded once until a fresh observation, and nothing else happens; in
// act mode the decision is recorded, then the session is cancelled with a
// *VerdictError (Rule: rule, Reason "liveness_failed", errors.Is
// ErrLivenessFailed, recoverable) or the configured action runs, then the
// outcome is recorded.
//
// It reports whether this observation made the rule decide. It returns an
// error wrapping ErrInvalidArgument for an undeclared rule, and the window's
// end cause if it has ended. Safe for concurrent use.
func (s *Session) ReportLiveness(rule string, stale bool) (decided bool, err error) {
	if !slices.Contains(s.cfg.policy.LivenessRules, rule) {
		return false, fmt.Errorf("%w: session %q: liveness rule %q is not declared in the policy's liveness_rules", ErrInvalidArgument, s.id, rule)
	}
	w := s.w
	now := w.now()
	var ef effects
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		return false, cause
	}
	r := s.rw()
	if r.liveness == nil {
		r.liveness = make(map[string]decide.LivenessState)
	}
	mode := s.cfg.policy.modeOf(rule)
	sn, now := s.snapshotLocked(now) // valid under w.mu only: summary copies it
	v := decide.Liveness(r.liveness[rule], stale, now, s.cfg.limits.SettleChecks, s.cfg.limits.SettleInterval, mode == ModeShadow, r.acting)
	r.liveness[rule] = v.State
	if v.Record || v.Action != decide.Continue {
		e := s.event(KindVerdict, now)
		e.Rule, e.ActiveChannel = rule, "none"
		e.SettleCount, e.SettleChecks = v.Stale, s.cfg.limits.SettleChecks
		e.EvidenceSummary = s.summary(sn, now)
		if v.Action != decide.Continue {
			decided = true
			e.ID, e.Kind, e.Mode, e.Reason = w.newID(), KindDecision, mode, reasonLivenessFailed
			recoverable := true
			e.Recoverable = &recoverable
		}
		w.record(&ef, e)
		if v.Action == decide.Act {
			ve := &VerdictError{SessionID: s.id, Window: int(s.window), Rule: rule, reason: reasonLivenessFailed,
				FiredAt: w.toRecord(now), Recoverable: true, DecisionID: e.ID,
				Elapsed: now.Sub(s.windowStartedAt), Budget: s.cfg.limits.WallClock}
			if w.action == nil {
				w.endLocked(s, ve, sn, now, &ef)
			} else {
				r.acting = true
				w.heap.Remove(&s.item)
				ef.acts = append(ef.acts, actItem{s: s, v: ve, noRecheck: true})
			}
		}
	}
	w.flushLocked(&ef)
	w.mu.Unlock()
	w.apply(&ef)
	if decided && mode == ModeAct && w.action == nil {
		w.log.Info("watchdog: session cancelled by a liveness rule", zap.String("session_id", s.id), zap.String("rule", rule))
	}
	return decided, nil
}
