package watchdog

import (
	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/policyview"
)

// The built-in rules' names (see "Rules" in the package documentation).
const (
	ruleWallClock      = "wall_clock"
	ruleSessionCeiling = "session_ceiling"
	ruleChildrenWait   = "children_wait"
	ruleIdle           = "idle"
)

// Stop reason codes of the result envelope (Result.StopReasonCode) and of
// terminal events (their reason) that no rule decided. A window a
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
	// StopAmended: Session.Amend ended the window to open the next one
	// under another policy.
	StopAmended = "amended"
	// StopRequested: Session.StopBy ended the window on purpose (an
	// operator, a parent's decision); its stop event says who (by) and
	// why. Resumable.
	StopRequested = "stop_requested"
)

const reasonLivenessFailed = "liveness_failed"

var ruleByName = map[string]decide.Rule{
	ruleWallClock:      decide.RuleWallClock,
	ruleSessionCeiling: decide.RuleSessionCeiling,
	ruleChildrenWait:   decide.RuleChildrenWait,
	ruleIdle:           decide.RuleIdle,
}

var ruleNames = [decide.NumRules]string{
	decide.RuleWallClock:      ruleWallClock,
	decide.RuleSessionCeiling: ruleSessionCeiling,
	decide.RuleChildrenWait:   ruleChildrenWait,
	decide.RuleIdle:           ruleIdle,
}

// ruleSentinel is the sentinel error of a rule, by name ("" if it has none
// of its own: a liveness rule of the user's goes by its reason).
func ruleSentinel(rule, reason string) error {
	switch rule {
	case ruleWallClock:
		return ErrWallClockExceeded
	case ruleSessionCeiling:
		return ErrSessionCeilingExceeded
	case ruleChildrenWait:
		return ErrChildrenWaitExceeded
	case ruleIdle:
		return ErrIdleExceeded
	case "handler_deadline", "iteration_deadline", "phase_deadline", "handler_idle":
		return ErrDeadlineExceeded
	}
	if reason == reasonLivenessFailed {
		return ErrLivenessFailed
	}
	return nil
}

func init() {
	policyview.Limits = func(p any) decide.Limits { return p.(Policy).limits() }
	policyview.RuleMode = func(p any, rule string) string { return string(p.(Policy).modeOf(rule)) }
	policyview.Clone = func(p any) any { return p.(Policy).clone() }
	policyview.BuiltinChannels = builtinChannels
	policyview.RuleByName = ruleByName
	policyview.RuleNames = ruleNames[:]
}
