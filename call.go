package watchdog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/ilist"
)

// CallLimits are the limits of a bounded call (Begin; Call gives a Cap
// alone), and the evidence channel it counts on. The zero value is not
// valid: Cap is required.
type CallLimits struct {
	// Cap is the longest the call may run, from its start; no progress
	// extends it. Required (positive).
	Cap time.Duration
	// Idle is the longest the call may go without progress (see
	// Progress on the call's Context) after its first progress. Zero means no idle
	// limit.
	Idle time.Duration
	// FirstProgress is the longest the call may go, from its start, before
	// its first progress: the time to a first chunk or token, which a
	// reasoning model may spend thinking. Zero means Idle. With Idle zero,
	// there is no idle limit after the first progress.
	FirstProgress time.Duration
	// Channel is the evidence channel of the call's begin, progress and
	// end: ChannelMCPTool for a tool call, ChannelSubagent for a
	// sub-agent's, or one of the policy's own channels (Session.Channel).
	// A call is never baseline evidence: the zero value (ChannelStdout)
	// means ChannelMCPTool. A channel the session does not have is an
	// error wrapping ErrInvalidArgument.
	Channel Channel
}

// maxCallsListed caps a verdict's list of calls in flight
// (Event.CallsInFlight): the oldest are listed, HandlersInFlight counts
// them all.
const maxCallsListed = 100

// CallHandle is a bounded call in flight: begun by Begin, possibly on one
// goroutine, and ended by End, possibly on another. Nothing of the
// library runs while it is in flight: its limits are timers of the
// Watchdog's scheduler (or, outside a session, of the runtime). All its
// methods are safe for concurrent use. A nil or zero CallHandle (not from
// Begin) is no call: Context is done with ErrInvalidArgument as its
// cause, End and Run return an error wrapping ErrInvalidArgument.
type CallHandle struct {
	l layer
}

// noCall is the context of a CallHandle that Begin did not return.
var noCall = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNoCall)
	return ctx
}()

var errNoCall = fmt.Errorf("%w: a CallHandle that Begin did not return", ErrInvalidArgument)

func (h *CallHandle) valid() bool { return h != nil && h.l.cancel != nil }

// Begin begins the bounded call name in ctx and returns its handle: the
// event form of Call, for a call that begins in one event (an LLM's
// tool_use block, an agent CLI's JSON line) and ends in another. The
// call's context (Context) ends at the first limit of l that fires (the
// cap l.Cap from now, which nothing extends, or an idle limit that
// progress refreshes: Progress on Context) with a *VerdictError cause:
// Rule "handler_deadline" (the cap) or "handler_idle" (reason
// handler_idle_exceeded, Elapsed the time without progress, Budget the
// idle limit that applied), both matching ErrDeadlineExceeded.
//
// When ctx belongs to a watched session (it derives from
// Session.Context), the limits run on the Watchdog's clock and scheduler,
// the call is bounded work that the session's idle rule waits for, its
// begin, progress and end are evidence on l.Channel, a limit that fires is
// recorded as a runtime.handler.deadline_exceeded event (naming the dying
// Step, carrying the call and its limits, from which Replay re-derives
// which limit fired), and a call not ended within the grace after it
// (Policy.HandlerGrace, default 5 s) is recorded as abandoned and no
// longer defers the idle rule. With WithCallRecords, End records the call
// completed, failed (End's err) or over its limit. Without a session the
// limits run on the real clock and nothing is recorded.
//
// An idle limit never fires before it has passed since the last progress,
// and one at or above the cap never fires before the cap. The context's
// Deadline is the earliest of the cap and ctx's, on the real clock (ctx's
// alone under another Clock, see Within).
//
// Begin returns an error, and no handle, when ctx is nil or already done
// (its cause), when the Watchdog is closed (ErrClosed), or for a bad name,
// a Cap that is not positive, a negative idle limit or an unknown channel
// (errors wrapping ErrInvalidArgument). Every handle Begin returns must be
// ended (End or Run); one left in flight is abandoned at its cap plus the
// grace.
func Begin(ctx context.Context, name string, l CallLimits) (*CallHandle, error) {
	return begin(ctx, LayerHandler, name, l)
}

// Context returns the call's context: done at the call's first limit that
// fires (its cause a *VerdictError), or when ctx is done, or after End.
func (h *CallHandle) Context() context.Context {
	if !h.valid() {
		return noCall
	}
	return h.l.ctx
}

// End ends the call with err, the call's own outcome (nil: it
// succeeded), and returns the error its caller should see: the
// *VerdictError if one of its limits fired first (or ErrClosed if the
// Watchdog closed meanwhile), else err. The first End records the call's
// end (evidence on its channel; with WithCallRecords, a
// runtime.handler.completed event whose reason is "ok", "error" with err's
// text, or the limit that fired) and cancels its context; a later End,
// or an End after Run, records nothing and returns the same way.
func (h *CallHandle) End(err error) error {
	if !h.valid() {
		return errNoCall
	}
	l := &h.l
	if !l.claimed.CompareAndSwap(false, true) {
		if c := l.firedCause(); c != nil {
			return c
		}
		return err
	}
	l.exited()
	fired := l.finish(err)
	if fired != nil {
		err = fired
	}
	l.report(err, fired)
	return err
}

// Run runs fn with the call's context and ends the call with fn's result:
// the function form of the handle, on which Call builds. The host enforces
// the limits: if fn has not returned within the grace after a limit fired
// (see Begin), Run returns the limit's error anyway and abandons fn's
// goroutine, which is counted (Watchdog.Stats) and recorded, never
// silently leaked. A panic in fn ends the call as failed and is re-raised
// in the caller. Run after End (or a second Run), or a nil fn, returns an
// error wrapping ErrInvalidArgument and does not run fn.
func (h *CallHandle) Run(fn func(ctx context.Context) error) error {
	if !h.valid() {
		return errNoCall
	}
	l := &h.l
	switch {
	case fn == nil:
		return h.End(fmt.Errorf("%w: %s %q: nil function", ErrInvalidArgument, l.kind, l.name))
	case !l.claimed.CompareAndSwap(false, true):
		return fmt.Errorf("%w: %s %q: Run after End or Run", ErrInvalidArgument, l.kind, l.name)
	}
	gone := l.await()
	select {
	case <-gone: // abandoned (or closed) before Run: fn never runs
		err := l.firedCause()
		l.report(err, err)
		return err
	default:
	}
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			l.exited()
			done <- r
		}()
		r.err = fn(l.ctx)
	}()
	var err, fired error
	select {
	case r := <-done:
		if r.panic != nil {
			fired = l.finish(fmt.Errorf("panic: %v", r.panic))
			l.report(fmt.Errorf("watchdog: %s %q panicked: %v", l.kind, l.name, r.panic), fired)
			panic(r.panic)
		}
		err = r.err
		if fired = l.finish(err); fired != nil {
			err = fired
		}
	case <-gone:
		err = l.firedCause()
		fired = err
	}
	l.report(err, fired)
	return err
}

// Call runs fn as the handler name under budget: Begin with CallLimits{Cap:
// budget}, then CallHandle.Run. A nil fn is an error wrapping
// ErrInvalidArgument.
func Call(ctx context.Context, name string, budget time.Duration, fn func(ctx context.Context) error) error {
	return Within(ctx, LayerHandler, name, budget, fn)
}

// Progress reports that the call ctx belongs to (its innermost deadline
// layer: Begin, Call or Within) has made progress, as value (a step
// count, bytes or chunks received). It counts only when value exceeds every
// value reported for that call before (the first counts if above zero), so
// a keep-alive that repeats a value keeps nothing alive. A counted report
// refreshes the call's idle deadline (never its cap, see Begin), is kept
// for the call's deadline record, is progress of the calls enclosing it too
// (each counts one step), and counts as evidence on the call's channel
// (CallLimits.Channel) on its session. A Session.Touch does not refresh a
// call's idle limit: it is evidence for the session's rules and does not
// say which of the calls in flight made progress. Progress reports whether
// it counted: false without a deadline layer in ctx, and once the call has
// ended or was abandoned (a goroutine left behind keeps nothing alive).
// Safe for concurrent use and free of allocations; lock-free except at a
// call's first progress when its idle limit is shorter than its
// first-progress limit.
func Progress(ctx context.Context, value uint64) bool {
	if ctx == nil {
		return false
	}
	l := layerFrom(ctx)
	return l != nil && l.progress(value)
}

func (l *layer) progress(value uint64) bool {
	if l.done.Load() {
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
		if !p.done.Load() { // an enclosing call progresses with it: one step
			p.prog.Add(1)
			p.progressed()
		}
	}
	if l.s != nil {
		l.s.Touch(l.ch)
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
		_, next := l.limits(l.progAt.Load()).Hit(now)
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
	_, next := l.limits(l.progAt.Load()).Hit(now)
	due := toNanos(next)
	if next.IsZero() {
		due = toNanos(now) // already due
	}
	w.heap.Push(&l.item, due)
	w.mu.Unlock()
	w.wakeBy(due)
}

// limits are the layer's limits for the call-limit rule (decide.Call),
// given at, a reading of its progAt (1 + ns after started; 0: never). A
// fire reads progAt once, so that its record holds the progress instant
// its verdict used (see Replay).
func (l *layer) limits(at int64) decide.Call {
	c := decide.Call{Start: l.started, Cap: l.budget, Idle: l.idle, First: l.first}
	if at > 0 {
		c.ProgressAt = l.started.Add(time.Duration(at - 1))
	}
	return c
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
		c.ProgressAt = l.limits(at).ProgressAt.UTC()
	}
	return c
}

// callsLocked lists s's running handlers, oldest first, for a verdict's
// record: at most maxCallsListed; nil if none. Called with w.mu held.
func (s *Session) callsLocked() []CallInFlight {
	r := s.r()
	if r.calls.Len() == 0 {
		return nil
	}
	out := make([]CallInFlight, 0, min(r.calls.Len(), maxCallsListed))
	for l := r.calls.Front(); l != nil && len(out) < maxCallsListed; l = l.inCalls.Next() {
		out = append(out, l.inFlight(l.progAt.Load()))
	}
	return out
}

// callLinks and allLinks pick a layer's links in a session's calls in
// flight and in the Watchdog's layers in flight (lists through the layers
// themselves, so that ending a call is O(1)).
type (
	callLinks struct{}
	allLinks  struct{}
)

func (callLinks) Links(l *layer) *ilist.Links[layer] { return &l.inCalls }
func (allLinks) Links(l *layer) *ilist.Links[layer]  { return &l.inAll }

// completedEvent is the KindCallCompleted event of l, returned at now
// with fnErr, after its deadline fired with cause (nil if it did not).
func (l *layer) completedEvent(now time.Time, fnErr, cause error) Event {
	e := l.s.event(KindCallCompleted, now)
	e.Handler, e.Layer = l.name, string(l.kind)
	e.MeasureSeconds, e.LimitSeconds = now.Sub(l.started).Seconds(), l.budget.Seconds()
	if at := l.progAt.Load(); at > 0 {
		e.ProgressAt = l.limits(at).ProgressAt.UTC()
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
