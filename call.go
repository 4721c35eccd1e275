package watchdog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// Call runs fn as the handler name under budget: Within(ctx, LayerHandler,
// name, budget, fn).
func Call(ctx context.Context, name string, budget time.Duration, fn func(ctx context.Context) error) error {
	return Within(ctx, LayerHandler, name, budget, fn)
}

// CallLimits are the limits of a call run with CallWith.
type CallLimits struct {
	// Cap is the longest the call may run, from its start; no progress
	// extends it. Required (positive).
	Cap time.Duration
	// Idle is the longest the call may go without progress (see Progress)
	// after its first progress. Zero means no idle limit.
	Idle time.Duration
	// FirstProgress is the longest the call may go, from its start, before
	// its first progress: the time to a first chunk or token, which a
	// reasoning model may spend thinking. Zero means Idle. With Idle zero,
	// there is no idle limit after the first progress.
	FirstProgress time.Duration
}

// CallWith runs fn as the handler name, as Call does, under the limits l:
// l.Cap from the call's start, which nothing extends, and the idle limits,
// which progress refreshes. Progress is a Progress call on fn's context (or
// a context derived from it) whose value exceeds every value reported
// before: each pushes the idle deadline to l.Idle after it, and the same
// value again (a keep-alive) does not. Whichever limit comes first ends fn's
// context with a *VerdictError: Rule "handler_idle" (reason
// handler_idle_exceeded, Elapsed the time without progress, Budget the idle
// limit that applied) or "handler_deadline" (the cap), both matching
// ErrDeadlineExceeded. The recorded runtime.handler.deadline_exceeded event
// carries the rule, the last progress value and when it advanced (progress,
// progress_at), and the call itself with its start and all its limits
// (calls_in_flight), from which Replay re-derives which limit fired. A
// Session.Touch does not refresh a call's idle limit: it
// is evidence for the session's rules and does not say which of the calls
// in flight made progress; the stream guard and the MCP and eino adapters
// report Progress on the call's context and touch their channel. An idle
// limit never fires before it has passed since the last progress, and one
// at or above the cap never fires before the cap. A zero or negative
// Cap, or a negative idle limit, is an error wrapping ErrInvalidArgument;
// otherwise see Within.
func CallWith(ctx context.Context, name string, l CallLimits, fn func(ctx context.Context) error) error {
	if l.Idle < 0 || l.FirstProgress < 0 {
		return fmt.Errorf("%w: handler %q: negative idle limit (idle %v, first progress %v)", ErrInvalidArgument, name, l.Idle, l.FirstProgress)
	}
	first := l.FirstProgress
	if first == 0 {
		first = l.Idle
	}
	return within(ctx, LayerHandler, name, l.Cap, l.Idle, first, fn)
}

// Progress reports that the call ctx belongs to (its innermost deadline
// layer: CallWith, Call or Within) has made progress, as value (a step
// count, bytes or chunks received). It counts only when value exceeds every
// value reported for that call before (the first counts if above zero), so
// a keep-alive that repeats a value keeps nothing alive. A counted report
// refreshes the call's idle deadline (never its cap, see CallWith), is kept
// for the call's deadline record, is progress of the calls enclosing it too
// (each counts one step), and counts as tool-call evidence (ChannelMCPTool)
// on the call's session. It reports whether it counted: false without a
// deadline layer in ctx, and once the call has returned or was abandoned (a
// goroutine left behind keeps nothing alive). Safe for concurrent use and
// free of allocations; lock-free except at a call's first progress when its
// idle limit is shorter than its first-progress limit.
func Progress(ctx context.Context, value uint64) bool {
	if ctx == nil {
		return false
	}
	l := layerFrom(ctx)
	if l == nil || l.ended.Load() {
		return false
	}
	for {
		p := l.prog.Load()
		if value <= p {
			return false
		}
		if l.prog.CompareAndSwap(p, value) {
			break
		}
	}
	l.progressed()
	for p := l.parent; p != nil; p = p.parent {
		if !p.ended.Load() { // an enclosing call progresses with it: one step
			p.prog.Add(1)
			p.progressed()
		}
	}
	if l.s != nil {
		l.s.Touch(ChannelMCPTool)
	}
	return true
}

// progressed stamps the layer's progress now, and moves its next check to
// the idle limit at its first progress if that is shorter.
func (l *layer) progressed() {
	var off int64
	if l.w != nil {
		off = l.w.nowNanos() - toNanos(l.started)
	} else {
		off = int64(time.Since(l.started))
	}
	if l.progAt.Swap(max(off, 0)+1) == 0 && l.idle > 0 && l.idle < l.first {
		l.rearm() // the first progress: the shorter idle limit applies from now on
	}
}

// rearm moves the layer's next check to what hit says now: after its first
// progress, when the idle limit is shorter than the first-progress one.
func (l *layer) rearm() {
	w := l.w
	if w == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.state != layerRunning || l.timers[0] == nil {
			return
		}
		now := time.Now()
		_, next := l.hit(now, l.progAt.Load())
		l.timers[0].Stop()
		l.timers[0] = time.AfterFunc(max(next.Sub(now), 0), l.fireReal)
		return
	}
	now := w.now()
	w.mu.Lock()
	if l.state != layerRunning {
		w.mu.Unlock()
		return
	}
	_, next := l.hit(now, l.progAt.Load())
	due := toNanos(next)
	if next.IsZero() {
		due = toNanos(now) // already due
	}
	w.heap.Push(&l.item, due)
	w.mu.Unlock()
	w.wakeBy(due)
}

// idleRef is when the layer last made progress, given at, a reading of
// its progAt: its start if never since.
func (l *layer) idleRef(at int64) time.Time {
	if at > 0 {
		return l.started.Add(time.Duration(at - 1))
	}
	return l.started
}

// idleLimit is the idle limit that applies, given at, a reading of its
// progAt: before the first progress, the first one.
func (l *layer) idleLimit(at int64) time.Duration {
	if at == 0 {
		return l.first
	}
	return l.idle
}

// hit reports the limit the layer has hit at now ("" for none, "cap" or
// "idle"; the cap first), and else the next instant to look again, given
// at, a reading of its progAt (a fire reads it once, so that its record
// holds the progress instant its verdict used: see Replay).
func (l *layer) hit(now time.Time, at int64) (string, time.Time) {
	if decide.Expired(l.started, l.budget, now) {
		return "cap", time.Time{}
	}
	next := l.deadline
	if idle := l.idleLimit(at); idle > 0 {
		ref := l.idleRef(at)
		if decide.Expired(ref, idle, now) {
			return "idle", time.Time{}
		}
		if d := ref.Add(idle); d.Before(next) {
			next = d
		}
	}
	return "", next
}

// CallInFlight is a handler that was running at a verdict, or the layer
// that died on a deadline record (see Event.CallsInFlight): its name and
// layer, when it started, its cap, its idle limit (zero: none) and its
// limit before the first progress (FirstProgressSeconds), and its last
// progress (Progress) with when it advanced (zero: none). It is a plain
// value, safe to copy and share once recorded.
type CallInFlight struct {
	Name          string    `json:"name"`
	Layer         Layer     `json:"layer"`
	StartedAt     time.Time `json:"started_at"`
	BudgetSeconds float64   `json:"budget_seconds"`
	IdleSeconds   float64   `json:"idle_seconds,omitempty"`
	// FirstProgressSeconds is the idle limit before the first progress
	// (CallLimits.FirstProgress), when it differs from IdleSeconds; zero:
	// IdleSeconds applies before the first progress too.
	FirstProgressSeconds float64   `json:"first_progress_seconds,omitempty"`
	Progress             uint64    `json:"progress,omitempty"`
	ProgressAt           time.Time `json:"progress_at,omitzero"`
}

// inFlight is l as a CallInFlight, given at, a reading of its progAt.
func (l *layer) inFlight(at int64) CallInFlight {
	c := CallInFlight{Name: l.name, Layer: l.kind, StartedAt: l.started.UTC(), BudgetSeconds: l.budget.Seconds(),
		IdleSeconds: l.idle.Seconds(), Progress: l.prog.Load()}
	if l.first != l.idle {
		c.FirstProgressSeconds = l.first.Seconds()
	}
	if at > 0 {
		c.ProgressAt = l.idleRef(at).UTC()
	}
	return c
}

// callsLocked lists s's running handlers, for a verdict's record; nil if
// none. Called with w.mu held.
func (s *Session) callsLocked() []CallInFlight {
	if s.rare == nil || len(s.rare.bounded) == 0 {
		return nil
	}
	out := make([]CallInFlight, len(s.rare.bounded))
	for i, l := range s.rare.bounded {
		out[i] = l.inFlight(l.progAt.Load())
	}
	return out
}

// completedEvent is the KindCallCompleted event of l, returned at now
// with fnErr, after its deadline fired with cause (nil if it did not).
func (l *layer) completedEvent(now time.Time, fnErr, cause error) Event {
	e := l.s.event(KindCallCompleted, now)
	e.Handler, e.Layer = l.name, string(l.kind)
	e.MeasureSeconds, e.LimitSeconds = now.Sub(l.started).Seconds(), l.budget.Seconds()
	if at := l.progAt.Load(); at > 0 {
		e.ProgressAt = l.idleRef(at).UTC()
	}
	e.ProgressValue = l.prog.Load()
	var v *VerdictError
	switch {
	case errors.As(cause, &v):
		e.Reason = v.reason
	case fnErr != nil:
		e.Reason, e.Error = "error", cleanText(fnErr.Error())
	default:
		e.Reason = "ok"
	}
	return e
}
