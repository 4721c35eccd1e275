package watchdog

import "github.com/sessionwatchdog/watchdog/internal/decide"

// The built-in rules, by the name used in Policy.RuleModes, in events' rule
// field and in VerdictError.Rule. Each rule has one name: its verdict's
// reason is the name followed by "_exceeded", the result's stop reason code
// is "watchdog_" followed by the reason, and its sentinel error is the one
// named after it.
//
//	rule             Policy field          reason                     stop reason code                     error
//	wall_clock       WallClock             wall_clock_exceeded        watchdog_wall_clock_exceeded         ErrWallClockExceeded
//	session_ceiling  SessionCeiling        session_ceiling_exceeded   watchdog_session_ceiling_exceeded    ErrSessionCeilingExceeded
//	children_wait    ChildrenWaitCeiling   children_wait_exceeded     watchdog_children_wait_exceeded      ErrChildrenWaitExceeded
//	idle             IdleWindow            idle_exceeded              watchdog_idle_exceeded               ErrIdleExceeded
//
// A liveness rule of your own (Policy.LivenessRules) has the reason
// "liveness_failed" and ErrLivenessFailed; a deadline layer's overrun has
// the rule "<layer>_deadline" (for example "handler_deadline"), the reason
// "<layer>_deadline_exceeded", which is also its stop reason code, and
// ErrDeadlineExceeded.
const (
	RuleWallClock      = "wall_clock"
	RuleSessionCeiling = "session_ceiling"
	RuleChildrenWait   = "children_wait"
	RuleIdle           = "idle"
)

// Stop reason codes of the result envelope (Result.StopReasonCode) and of
// terminal events (Event.StopReasonCode) that no rule decided. A window a
// rule ended has its verdict's code (see the rules above and
// VerdictError.StopReasonCode).
const (
	// StopCompleted: the session's function returned nil (or Stop was
	// called). Not resumable.
	StopCompleted = "completed"
	// StopFailed: the session's function returned an error of its own.
	StopFailed = "failed"
	// StopCanceled: the caller's context ended the session.
	StopCanceled = "canceled"
	// StopWatchdogClosed: the Watchdog was closed while the session ran. No
	// terminal event is recorded, so a resume continues the same window.
	StopWatchdogClosed = "watchdog_closed"
	// StopRecoveryBudgetExceeded: a phase's recoverable failures outlasted
	// its recovery budget (RunPhase).
	StopRecoveryBudgetExceeded = "recovery_budget_exceeded"
)

const reasonLivenessFailed = "liveness_failed"

var ruleByName = map[string]decide.Rule{
	RuleWallClock:      decide.RuleWallClock,
	RuleSessionCeiling: decide.RuleSessionCeiling,
	RuleChildrenWait:   decide.RuleChildrenWait,
	RuleIdle:           decide.RuleIdle,
}

var ruleNames = [decide.NumRules]string{
	decide.RuleWallClock:      RuleWallClock,
	decide.RuleSessionCeiling: RuleSessionCeiling,
	decide.RuleChildrenWait:   RuleChildrenWait,
	decide.RuleIdle:           RuleIdle,
}

// ruleSentinel is the sentinel error of a rule, by name ("" if it has none
// of its own: a liveness rule of the user's goes by its reason).
func ruleSentinel(rule, reason string) error {
	switch rule {
	case RuleWallClock:
		return ErrWallClockExceeded
	case RuleSessionCeiling:
		return ErrSessionCeilingExceeded
	case RuleChildrenWait:
		return ErrChildrenWaitExceeded
	case RuleIdle:
		return ErrIdleExceeded
	case "handler_deadline", "iteration_deadline", "phase_deadline":
		return ErrDeadlineExceeded
	}
	if reason == reasonLivenessFailed {
		return ErrLivenessFailed
	}
	return nil
}
