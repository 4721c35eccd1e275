// Package watchdog keeps long-running AI-agent sessions and pipeline loops
// from stalling silently: a session never stops, and never runs past its
// budget, without a recorded reason, and it is never killed while it is
// demonstrably working, except by a ceiling that nothing extends.
//
// # Sessions and the wall-clock budget
//
// One Watchdog supervises many sessions with a single scheduler goroutine
// over a deadline heap; a watched session costs a few hundred bytes and no
// CPU until something is due. Start begins a session (window 1), Stop ends
// it normally, Run wraps a pipeline loop and returns a Result envelope. When
// a window outruns its budget (Policy.WallClock, default four hours) the
// session's context is cancelled with a cause that errors.As reads as a
// *VerdictError, so that errors.Is(context.Cause(ctx), ErrWallClockExceeded)
// holds, and exactly one runtime.watchdog.cancel event is recorded. Resume
// re-attaches a session after a restart by reading session_started_at back
// from the store; a resume after a cancel opens a fresh window.
//
// # Idle detection on evidence
//
// Record evidence of work with Session.Touch (about a nanosecond, lock-free,
// allocation-free) on the channels stdout (the baseline), mcp_tool, subagent,
// workspace and any you name, or let Session.Writer, Session.WatchWorkspace and
// Session.Progress record it. When stdout has been silent past
// Policy.IdleWindow, the idle rule waits while another channel is fresher than
// Policy.EvidenceTTL (a CONTINUE, recorded with the evidence summary and the
// channel that justified it) and otherwise stops the session after
// Policy.SettleChecks consecutive stale observations. Policy.SessionCeiling and
// Policy.ChildrenWaitCeiling are absolute: no evidence extends them. Any rule
// can run in shadow mode, which records its decision and does nothing else.
//
// # Rules
//
// Each rule has one name, used in Policy.RuleModes, in events' rule field and
// in VerdictError.Rule: its verdict's reason is the name followed by
// "_exceeded", the result's stop reason code is "watchdog_" followed by the
// reason, and its sentinel error is the one named after it.
//
//	rule             Policy field          reason                     stop reason code                     error
//	wall_clock       WallClock             wall_clock_exceeded        watchdog_wall_clock_exceeded         ErrWallClockExceeded
//	session_ceiling  SessionCeiling        session_ceiling_exceeded   watchdog_session_ceiling_exceeded    ErrSessionCeilingExceeded
//	children_wait    ChildrenWaitCeiling   children_wait_exceeded     watchdog_children_wait_exceeded      ErrChildrenWaitExceeded
//	idle             IdleWindow            idle_exceeded              watchdog_idle_exceeded               ErrIdleExceeded
//
// A liveness rule of your own (Policy.LivenessRules) goes by the name you
// give it, with the reason "liveness_failed" and ErrLivenessFailed; a
// deadline layer's overrun has the rule "<layer>_deadline" (for example
// "handler_deadline"), the reason "<layer>_deadline_exceeded", which is also
// its stop reason code, and ErrDeadlineExceeded; a call that went without
// progress past its idle limit (CallLimits.Idle) has the rule "handler_idle" and
// the reason "handler_idle_exceeded", with ErrDeadlineExceeded too.
//
// # Decision, action, outcome
//
// The verdict is a pure function of (policy, session snapshot, now). An acting
// verdict records a decision event, then acts (cancels the session's context,
// or runs the action given to WithAction), then records the outcome, which
// links back to the decision. Replay re-derives every recorded verdict from a
// log alone.
//
// # Handlers, waiting and recovery
//
// Call and Within give every handler, iteration and phase its own deadline in
// its context; the host enforces it (a function that ignores its context is
// abandoned at deadline + grace, and Command kills a subprocess's whole process
// group), and Step names the step that was running when it died. While a
// handler with a deadline is in flight the idle rule waits for it. Session.Wait
// arms a waiting watchdog whose fire calls back instead of cancelling.
// RunPhase retries a phase that ended with a recoverable verdict, within a
// recovery budget.
//
// # Recording
//
// Events go through an EventStore on the Watchdog's recorder goroutine: a
// slow or failing store delays the record, never the verdict, and Close
// reports what it could not record. MemoryStore is the default, the stores/file package is
// a durable JSON Lines log, and the stores/postgres module serves fleets. The
// store arbitrates terminal events, so exactly one cancel per window holds
// across Watchdogs and processes; Follow lets another component exit when the
// session is cancelled. Observer (and the otelwatchdog module) exposes metrics
// and traces.
//
// # Testing
//
// Inject a *clock.Mock with WithClock and move time with watchdogtest.Advance
// (or Mock.Add followed by Watchdog.Check, the settle point). The real clock
// also works unchanged inside a testing/synctest bubble.
//
// # Inside
//
// ARCHITECTURE.md in the repository names every goroutine a Watchdog runs,
// what each owns, every lock and its order, and the path of a fire.
package watchdog
