package watchdog

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// Observer is the Watchdog's hook for metrics and traces; it has no
// dependency, and the otelwatchdog module adapts it to OpenTelemetry. Every
// field is optional; the zero Observer observes nothing. Hooks are called
// without any lock held and must be safe for concurrent use and quick.
type Observer struct {
	// OnEvent is called on the recorder goroutine after each event has been
	// appended to the store (verdicts, decisions, outcomes, handler
	// overruns...). Events the store refused are not reported.
	OnEvent func(e Event)

	// OnHandler is called when a deadline layer (Begin, Call, Within,
	// RunPhase) starts, on the caller's goroutine, with the budget left.
	// The context it returns (when not nil) becomes the layer's context,
	// so a tracer can start a span there. The function it returns (when
	// not nil) is called once when the layer ends (End, or Run's return),
	// with the error the caller gets and the overrun event when the
	// deadline fired (its DyingSpan names the step that was running), so
	// the handler and the verdict it caused share one trace.
	OnHandler func(ctx context.Context, layer Layer, name string, remaining time.Duration) (context.Context, func(err error, overrun *Event))

	// OnSchedulerTick is called after scheduler passes that found
	// something due, with the lateness: how long after its due instant the
	// most overdue item was handled. It runs on a goroutine of its own, so
	// a slow hook delays no fire: the passes made while it runs are folded
	// into its next call, with the largest lateness.
	OnSchedulerTick func(lateness time.Duration)
}

// tickHook calls Observer.OnSchedulerTick on a goroutine of its own (see
// there), folding the passes made while the hook runs into its next call.
type tickHook struct {
	fn   func(lateness time.Duration)
	max  atomic.Int64 // the largest lateness not delivered yet, plus one; 0 when none
	wake chan struct{}
	done chan struct{} // closed when the goroutine returns
}

func newTickHook(fn func(time.Duration)) *tickHook {
	return &tickHook{fn: fn, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// report hands a pass's lateness to the hook's goroutine; it never blocks.
func (h *tickHook) report(d time.Duration) {
	v := int64(max(d, 0)) + 1
	for cur := h.max.Load(); v > cur && !h.max.CompareAndSwap(cur, v); cur = h.max.Load() {
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// run is the hook's goroutine; it returns when stop is closed (after the
// call in progress, if any: the hook is user code).
func (h *tickHook) run(stop <-chan struct{}, f *userFaults) {
	defer close(h.done)
	for {
		select {
		case <-stop:
			return
		case <-h.wake:
			if v := h.max.Swap(0); v > 0 {
				callHook(f, "OnSchedulerTick", func() { h.fn(time.Duration(v - 1)) })
			}
		}
	}
}

// callHook calls an Observer hook, turning a panic into a logged error: a
// hook's fault never crashes the process or stops the Watchdog.
func callHook(uf *userFaults, name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			uf.recovered("watchdog: Observer hook panicked", zap.String("hook", name), zap.Any("panic", p))
		}
	}()
	f()
}

// onEventHook wraps Observer.OnEvent so that a panic in it is logged, not
// raised on the recorder goroutine.
func onEventHook(fn func(Event), uf *userFaults) func(*Event) {
	if fn == nil {
		return nil
	}
	return func(e *Event) { callHook(uf, "OnEvent", func() { fn(*e) }) }
}

// userFaults logs and counts the panics recovered from user code
// (Stats.Panics).
type userFaults struct {
	log *zap.Logger
	n   atomic.Int64
}

func (uf *userFaults) recovered(msg string, fields ...zap.Field) {
	uf.n.Add(1)
	uf.log.Error(msg, fields...)
}

// call runs f, user code named what, turning a panic into an error.
func (uf *userFaults) call(what string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			uf.recovered("watchdog: user code panicked", zap.String("in", what), zap.Any("panic", p))
			err = fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	return f()
}

// Stats is a snapshot of a Watchdog's state, for metrics and health checks
// (otelwatchdog exports it as gauges). The zero Stats is a Watchdog with
// nothing to report.
type Stats struct {
	// Sessions is the number of windows being watched.
	Sessions int
	// Queued is the number of records waiting for the store, a fire's
	// decision and cancel counting as one. From 262,144 on, Start and
	// Resume are refused and repeated CONTINUE records of a session are
	// folded into its latest until the store catches up.
	Queued int
	// OldestQueued is how long the record queued longest has waited for
	// the store, on the Watchdog's clock (0 when none waits): how far the
	// store is behind.
	OldestQueued time.Duration
	// Coalesced counts the CONTINUE records folded into a later one of
	// their session because the queue was full (never a decision or an
	// outcome).
	Coalesced int64
	// HungAppends is the number of goroutines left in a store Append that
	// did not return within its timeout (10 s); while one of them still
	// runs, the store is not answering.
	HungAppends int
	// FailingActions is the number of sessions whose last action failed
	// (or panicked) and whose rule is looked at again after a backoff.
	FailingActions int
	// Panics counts the panics recovered from user code: store Append and
	// Load, Observer hooks, actions, Wait callbacks and a Clock's methods.
	// Each is also logged at error level.
	Panics int64
	// AbandonedHandlers counts the functions abandoned because they
	// ignored their deadline past the grace period (each is also recorded
	// as runtime.handler.abandoned); AbandonedRunning is how many of those
	// are still running.
	AbandonedHandlers, AbandonedRunning int64
	// With a Leaser store (see WithLease): LeaseRenewals and LeaseFailures
	// count the heartbeats that renewed the lease and those that failed;
	// Adopted counts the windows this Watchdog took over from lost owners
	// (WithAdoption), and Disowned the sessions it stopped watching
	// because another owner holds their window now.
	LeaseRenewals, LeaseFailures, Adopted, Disowned int64
}

// Stats returns a snapshot of w's state. It is cheap (a short lock, no
// store call) and safe for concurrent use, also after Close.
func (w *Watchdog) Stats() Stats {
	w.mu.Lock()
	sessions := w.sessions.Len()
	w.mu.Unlock()
	var since time.Time
	w.rec.Oldest(func(en *entry) {
		if en.fire != nil {
			since = en.facts.now
		} else {
			since = en.ev.OccurredAt
		}
	})
	var oldest time.Duration
	if !since.IsZero() {
		oldest = max(0, w.now().Sub(since))
	}
	return Stats{
		Sessions:          sessions,
		Queued:            w.rec.Len(),
		OldestQueued:      oldest,
		Coalesced:         w.rec.Coalesced(),
		HungAppends:       w.rec.Hung(),
		FailingActions:    int(w.failingActions.Load()),
		Panics:            w.faults.n.Load(),
		AbandonedHandlers: w.abandoned.Load(),
		AbandonedRunning:  w.running.Load(),
		LeaseRenewals:     w.leaseRenewals.Load(),
		LeaseFailures:     w.leaseFailures.Load(),
		Adopted:           w.adopted.Load(),
		Disowned:          w.disowned.Load(),
	}
}

// RuleMode is a rule and the mode it runs in, the key of
// Watchdog.SessionsByRule.
type RuleMode struct {
	// Rule is a rule's name: "wall_clock", "session_ceiling",
	// "children_wait", "idle" or one of a Policy's LivenessRules.
	Rule string
	// Mode is the rule's mode in the session's Policy: ModeAct or
	// ModeShadow (never empty).
	Mode Mode
}

// SessionsByRule returns, for each rule and mode, how many of the windows
// being watched (those Stats.Sessions counts) have that rule armed in that
// mode by their Policy: wall_clock always (so its two modes add up to
// Stats.Sessions), session_ceiling, children_wait and idle when their
// Policy field is set, and every declared liveness rule. A window counts
// from the Start or Resume that opens or continues it until it ends (a stop
// or a cancel), the Watchdog stops watching it (Close, or another owner
// holds it) or a refused opening releases it; a shadow decision does not
// end it. Pairs with no window are absent (nil when nothing is watched).
//
// It is safe for concurrent use, also after Close (then nil). It holds the
// Watchdog's lock only to copy the list of sessions: it costs O(sessions),
// so call it once per metrics collection, not per event.
func (w *Watchdog) SessionsByRule() map[RuleMode]int {
	w.mu.Lock()
	live := w.sessions.All()
	w.mu.Unlock()
	if len(live) == 0 {
		return nil
	}
	var bySig [1 << (2 * decide.NumRules)]int // sessions by ruleSig
	var liveness map[*sessionConfig]int       // configs declaring liveness rules
	for _, s := range live {
		c := s.cfg // set before the session was shared, never changed
		bySig[c.ruleSig()]++
		if len(c.policy.LivenessRules) > 0 {
			if liveness == nil {
				liveness = make(map[*sessionConfig]int)
			}
			liveness[c]++
		}
	}
	out := make(map[RuleMode]int)
	for sig, n := range bySig {
		for r := range decide.NumRules {
			if n > 0 && sig&(1<<r) != 0 {
				mode := ModeAct
				if sig&(1<<(decide.NumRules+r)) != 0 {
					mode = ModeShadow
				}
				out[RuleMode{ruleNames[r], mode}] += n
			}
		}
	}
	for c, n := range liveness {
		for _, rule := range c.policy.LivenessRules {
			out[RuleMode{rule, c.policy.modeOf(rule)}] += n
		}
	}
	return out
}

// ruleSig is the set of built-in rules c arms (bit r for rule r) and of
// those in shadow mode (bit NumRules+r): the wall clock always, the others
// when their limit is set.
func (c *sessionConfig) ruleSig() int {
	l := &c.limits
	sig := 1 << decide.RuleWallClock
	for r, armed := range [...]bool{
		decide.RuleSessionCeiling: l.SessionCeiling > 0,
		decide.RuleChildrenWait:   l.ChildWaitCeiling > 0,
		decide.RuleIdle:           l.IdleWindow > 0,
	} {
		if armed {
			sig |= 1 << r
		}
	}
	for r := range decide.NumRules {
		if sig&(1<<r) != 0 && l.Shadow.Has(r) {
			sig |= 1 << (decide.NumRules + r)
		}
	}
	return sig
}
