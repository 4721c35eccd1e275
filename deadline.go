package watchdog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/ilist"
	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// Layer names a level of deadline under the session: phase > iteration >
// handler. Layers nest through contexts; the innermost deadline wins and the
// cause names the layer that fired.
type Layer string

// The layers.
const (
	LayerPhase     Layer = "phase"
	LayerIteration Layer = "iteration"
	LayerHandler   Layer = "handler"
)

// defaultHandlerGrace is how long a layer waits, after its deadline, for fn
// to return before it abandons it (Policy.HandlerGrace).
const defaultHandlerGrace = 5 * time.Second

// layer is one deadline layer in flight.
type layer struct {
	w        *Watchdog // nil without a session: real timers, no events
	s        *Session
	kind     Layer
	name     string
	budget   time.Duration // the cap
	idle     time.Duration // the idle limit that progress refreshes (CallLimits.Idle); 0: none
	first    time.Duration // the idle limit before the first progress; 0: none
	grace    time.Duration
	started  time.Time
	deadline time.Time
	cancel   context.CancelCauseFunc
	step     atomic.Pointer[string]
	vctx     layerCtx      // the value context under fn's context
	tctx     timeCtx       // fn's context
	done     atomic.Bool   // the call ended or was abandoned: Progress counts no more
	claimed  atomic.Bool   // End or Run was called
	ch       Channel       // the evidence channel of a handler (CallLimits.Channel)
	prog     atomic.Uint64 // the last progress value (Progress)
	progAt   atomic.Int64  // when progress last advanced: 1 + ns after started; 0: never
	item     sched.Item[timed]
	parent   *layer                          // the enclosing layer, if any
	abandon  chan struct{}                   // Run's, made by it: closed when it must give up on fn (guarded by mu)
	ctx      context.Context                 // the call's context: &tctx, or the one Observer.OnHandler returned
	endHook  func(err error, overrun *Event) // Observer.OnHandler's end, if any

	inCalls ilist.Links[layer] // in the session's calls in flight; guarded by w.mu
	inAll   ilist.Links[layer] // in the Watchdog's layers in flight; guarded by w.mu

	mu            sync.Mutex // guards abandon, gone, abandonedFlag and exitedFlag; and the fields below when w is nil (else w.mu does)
	gone          bool       // abandoned or closed: Run gives up on fn
	abandonedFlag bool
	exitedFlag    bool
	state         int // layerRunning, layerFired, layerDone
	cause         error
	event         *Event
	timers        [2]*time.Timer // without a Watchdog
}

const (
	layerRunning = iota
	layerFired
	layerDone
)

type layerKey struct{}

func layerFrom(ctx context.Context) *layer {
	l, _ := ctx.Value(layerKey{}).(*layer)
	return l
}

// layerCtx is the layer's value context, kept inside the layer: it carries
// the layer for layerFrom and reports its cap as a deadline.
type layerCtx struct {
	context.Context // the parent
	l               *layer
}

func (c *layerCtx) Value(key any) any {
	if key == (layerKey{}) {
		return c.l
	}
	return c.Context.Value(key)
}

// Deadline reports the earliest of the parent's deadline and the layer's
// cap, on the real clock (none under another Clock: see Within).
func (c *layerCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	l := c.l
	if l.w != nil && l.w.rt == nil {
		return d, ok
	}
	own := l.deadline
	if l.w != nil {
		own = l.w.wall(own)
	}
	if !ok || own.Before(d) {
		d, ok = own, true
	}
	return d, ok
}

// Step marks the step name as running in ctx's innermost deadline layer until
// the returned func is called; if the layer's deadline fires meanwhile, its
// event and error name that step as dying_span. Steps nest: ending one
// restores the step around it. Outside any layer it does nothing.
//
// The name is free text: invalid UTF-8 and NUL bytes become U+FFFD in the
// record, and a name longer than 4,096 bytes is cut.
func Step(ctx context.Context, name string) (end func()) {
	if ctx == nil {
		return func() {}
	}
	l := layerFrom(ctx)
	if l == nil {
		return func() {}
	}
	name = cleanText(name)
	p := &name
	prev := l.step.Swap(p)
	return func() { l.step.CompareAndSwap(p, prev) }
}

// Within runs fn under a deadline layer of kind layer, named name, with its
// own budget carried in fn's context, as Begin and CallHandle.Run do for a
// handler (see them: the context, the recorded overrun, the grace after
// which fn is abandoned, panics). For LayerHandler it is Call. For a phase
// or an iteration, the layer is no bounded work for the idle rule and no
// evidence, and a zero budget means the session policy's (PhaseBudgets[name]
// for a phase, IterationBudget for an iteration). A budget that is still
// <= 0, or a nil fn, is an error wrapping ErrInvalidArgument.
func Within(ctx context.Context, kind Layer, name string, budget time.Duration, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: %s %q: nil function", ErrInvalidArgument, kind, name)
	}
	h, err := begin(ctx, kind, name, CallLimits{Cap: budget})
	if err != nil {
		return err
	}
	return h.Run(fn)
}

// begin is Begin for any layer.
func begin(ctx context.Context, kind Layer, name string, lim CallLimits) (*CallHandle, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	s := FromContext(ctx)
	budget := lim.Cap
	if s != nil && budget == 0 {
		switch kind {
		case LayerPhase:
			budget = s.cfg.policy.PhaseBudgets[name]
		case LayerIteration:
			budget = s.cfg.policy.IterationBudget
		}
	}
	if err := checkName(string(kind)+" name", name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	ch := lim.Channel
	if ch == ChannelStdout {
		ch = ChannelMCPTool
	}
	switch {
	case budget <= 0:
		return nil, fmt.Errorf("%w: %s %q: budget %v must be positive", ErrInvalidArgument, kind, name, budget)
	case kind != LayerPhase && kind != LayerIteration && kind != LayerHandler:
		return nil, fmt.Errorf("%w: unknown layer %q", ErrInvalidArgument, kind)
	case lim.Idle < 0 || lim.FirstProgress < 0:
		return nil, fmt.Errorf("%w: %s %q: negative idle limit (idle %v, first progress %v)", ErrInvalidArgument, kind, name, lim.Idle, lim.FirstProgress)
	case s != nil && s.chanAt(ch) == nil:
		return nil, fmt.Errorf("%w: %s %q: session %q has no evidence channel %d", ErrInvalidArgument, kind, name, s.id, ch)
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	first := lim.FirstProgress
	if first == 0 {
		first = lim.Idle
	}
	h := &CallHandle{}
	l := &h.l
	*l = layer{kind: kind, name: name, budget: budget, idle: lim.Idle, first: first, grace: defaultHandlerGrace, ch: ch}
	l.item.Value = l
	var obs Observer
	if s != nil {
		l.w, l.s, l.grace, obs = s.w, s, s.cfg.grace, s.w.obs
	}
	l.vctx = layerCtx{ctx, l}
	inner, cancel := context.WithCancelCause(&l.vctx)
	l.tctx = timeCtx{inner}
	l.ctx, l.cancel = &l.tctx, cancel
	l.parent = layerFrom(ctx)
	if s != nil && kind == LayerHandler {
		s.Touch(ch) // a call's begin is evidence
	}
	if err := l.arm(); err != nil {
		cancel(err)
		return nil, err
	}
	if obs.OnHandler != nil {
		var c context.Context
		var end func(error, *Event)
		callHook(l.faults(), "OnHandler", func() { c, end = obs.OnHandler(&l.tctx, kind, name, l.remaining()) })
		if c != nil {
			l.ctx = c
		}
		if end != nil {
			f := l.faults()
			l.endHook = func(err error, overrun *Event) {
				callHook(f, "OnHandler's end", func() { end(err, overrun) })
			}
		}
	}
	return h, nil
}

// report ends the layer's context, with cause if a limit fired (so that
// its cause is the verdict even when the end came before the scheduler
// cancelled it), and calls the OnHandler hook's end with err, the error
// its caller gets.
func (l *layer) report(err, cause error) {
	l.cancel(cause)
	if l.endHook != nil {
		l.endHook(err, l.overrunEvent())
	}
}

// remaining is the time left from the layer's start until the earliest of
// its own deadline, its enclosing layers' and the session window's.
func (l *layer) remaining() time.Duration {
	end := l.deadline
	for p := l.parent; p != nil; p = p.parent {
		if p.deadline.Before(end) {
			end = p.deadline
		}
	}
	if l.s != nil {
		if d := l.s.Deadline(); d.Before(end) {
			end = d
		}
	}
	return end.Sub(l.started)
}

// arm schedules the layer's deadline: ErrClosed if the Watchdog is closed.
func (l *layer) arm() error {
	w := l.w
	if w == nil {
		l.started = time.Now()
		l.deadline = l.started.Add(l.budget)
		_, next := l.limits(0).Hit(l.started)
		l.timers[0] = time.AfterFunc(next.Sub(l.started), l.fireReal)
		return nil
	}
	l.started = w.now()
	l.deadline = l.started.Add(l.budget)
	_, next := l.limits(0).Hit(l.started)
	due := toNanos(next)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.layers.Push(l)
	if l.kind == LayerHandler && l.s.state.Load() == stateRunning {
		l.s.rw().calls.Push(l)
	}
	w.heap.Push(&l.item, due)
	w.mu.Unlock()
	w.wakeBy(due)
	return nil
}

// verdict builds the layer's overrun verdict at now, for the limit hit
// given at, the reading of its progAt that hit used.
func (l *layer) verdict(now time.Time, hit decide.CallLimit, at int64) *VerdictError {
	v := &VerdictError{
		Rule:    string(l.kind) + "_deadline",
		reason:  string(l.kind) + "_deadline_exceeded",
		Layer:   l.kind,
		Name:    l.name,
		Elapsed: now.Sub(l.started),
		Budget:  l.budget,
		FiredAt: now.UTC(),
		// A handler or iteration overrun may be retried by a recovery
		// layer; a phase overrun ends the phase.
		Recoverable: l.kind != LayerPhase,
	}
	if hit == decide.CallIdle {
		lim := l.limits(at)
		v.Rule, v.reason = string(l.kind)+"_idle", string(l.kind)+"_idle_exceeded"
		v.Elapsed, v.Budget = now.Sub(lim.IdleRef()), lim.IdleLimit()
	}
	if l.w != nil {
		v.FiredAt = l.w.toRecord(v.FiredAt)
	}
	if p := l.step.Load(); p != nil {
		v.DyingSpan = *p
	}
	if l.s != nil {
		v.SessionID, v.Window = l.s.id, int(l.s.window)
	}
	return v
}

// fireLocked handles the deadline (state running) or the end of the grace
// period (state fired). Called by the scheduler with w.mu held.
func (l *layer) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	switch l.state {
	case layerRunning:
		// One reading of the progress instant for the verdict and its
		// record, so that Replay re-derives the rule from the record
		// exactly (a Progress may land meanwhile: it counts no more).
		at := l.progAt.Load()
		lim := l.limits(at)
		if lim.ProgressAt.After(now) {
			now = lim.ProgressAt // progress dated after the pass read the Clock: decide at it
		}
		hit, next := lim.Hit(now)
		if hit == decide.CallWithin {
			w.heap.Push(&l.item, toNanos(next))
			return
		}
		v := l.verdict(now, hit, at)
		l.state, l.cause = layerFired, v
		e := l.s.event(KindHandlerDeadline, now)
		e.ID = w.newID()
		e.Reason, e.Rule = v.reason, v.Rule
		e.Handler, e.Layer, e.DyingSpan = l.name, string(l.kind), v.DyingSpan
		e.MeasureSeconds, e.LimitSeconds = v.Elapsed.Seconds(), v.Budget.Seconds()
		c := l.inFlight(at) // the layer that died, with its limits (see Replay)
		e.ProgressValue, e.ProgressAt = c.Progress, c.ProgressAt
		e.CallsInFlight = []CallInFlight{c}
		rec := v.Recoverable
		e.Recoverable = &rec
		overrun := e                              // as recorded (see record)
		overrun.CallsInFlight = []CallInFlight{c} // its own: shiftEvent shifts it in place
		shiftEvent(&overrun, int64(w.recOffset()))
		l.event = &overrun
		v.DecisionID = e.ID
		w.record(ef, e)
		w.heap.Push(&l.item, toNanos(now.Add(l.grace)))
		ef.after = append(ef.after, func() {
			l.cancel(v)
			w.log.Warn("watchdog: deadline exceeded", zap.String("session_id", v.SessionID),
				zap.String("layer", string(l.kind)), zap.String("name", l.name),
				zap.String("dying_span", v.DyingSpan), zap.Duration("budget", l.budget))
		})
	case layerFired:
		l.state = layerDone
		w.unregisterLocked(l, now)
		w.abandoned.Add(1)
		l.markAbandoned()
		e := l.s.event(KindHandlerAbandoned, now)
		e.Reason, e.Handler, e.Layer = l.cause.(*VerdictError).reason, l.name, string(l.kind)
		e.DyingSpan = l.cause.(*VerdictError).DyingSpan
		e.MeasureSeconds, e.LimitSeconds = now.Sub(l.started).Seconds(), (l.budget + l.grace).Seconds()
		w.record(ef, e)
		ef.after = append(ef.after, func() {
			l.giveUp()
			w.log.Error("watchdog: handler ignored its deadline and was abandoned", zap.String("session_id", l.s.id),
				zap.String("layer", string(l.kind)), zap.String("name", l.name), zap.Duration("grace", l.grace))
		})
	}
}

// unregisterLocked removes l from the Watchdog's and the session's books and
// re-examines the session at now if the idle rule was waiting for its last
// call in flight (the caller then wakes the scheduler by now). O(1) but for
// the heap's removal (O(log n) of the timers pending). Called with w.mu held.
func (w *Watchdog) unregisterLocked(l *layer, now time.Time) {
	w.layers.Remove(l)
	w.heap.Remove(&l.item)
	s := l.s
	if s.rare == nil {
		return
	}
	r := s.rare
	if r.calls.Remove(l) && r.calls.Len() == 0 && s.state.Load() == stateRunning && !r.acting {
		// The idle rule may have been deferring for the calls in flight;
		// while others remain, it still is, and looks again by their end.
		w.pullInLocked(s, toNanos(now))
	}
}

// finish marks the layer done after fn returned fnErr and reports the
// deadline error if the deadline had fired.
func (l *layer) finish(fnErr error) error {
	l.done.Store(true)
	w := l.w
	if w == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, t := range l.timers {
			if t != nil {
				t.Stop()
			}
		}
		st := l.state
		l.state = layerDone
		if st == layerFired {
			return l.cause
		}
		return nil
	}
	if l.kind == LayerHandler {
		// Its completion is evidence too, recorded before the idle rule
		// looks again, so that the instant a tool returns is not taken
		// for silence (with deferral on).
		l.s.Touch(l.ch)
	}
	now := w.now()
	w.mu.Lock()
	st := l.state
	if st != layerDone {
		l.state = layerDone
		w.unregisterLocked(l, now)
	}
	cause := l.cause
	if w.calls > 0 && l.kind == LayerHandler && st != layerDone && l.s.state.Load() == stateRunning {
		if r := l.s.rw(); r.callsRecorded < w.calls {
			r.callsRecorded++
			w.record(nil, l.completedEvent(now, fnErr, cause))
		}
	}
	w.mu.Unlock()
	w.wakeBy(toNanos(now))
	if st == layerFired || (st == layerDone && cause != nil) {
		return cause
	}
	return nil
}

// firedCause is the layer's cause: the verdict of the limit that fired, or
// ErrClosed; nil if neither.
func (l *layer) firedCause() error {
	if l.w == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cause
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.cause
}

func (l *layer) overrunEvent() *Event {
	if l.w == nil {
		return nil
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.event
}

// fireReal and graceReal are the deadline and grace of a layer without a
// Watchdog, on real timers.
func (l *layer) fireReal() {
	l.mu.Lock()
	if l.state != layerRunning {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	at := l.progAt.Load()
	hit, next := l.limits(at).Hit(now)
	if hit == decide.CallWithin {
		l.timers[0] = time.AfterFunc(next.Sub(now), l.fireReal)
		l.mu.Unlock()
		return
	}
	v := l.verdict(now, hit, at)
	l.state, l.cause = layerFired, v
	l.timers[1] = time.AfterFunc(l.grace, l.graceReal)
	l.mu.Unlock()
	l.cancel(v)
}

func (l *layer) graceReal() {
	l.mu.Lock()
	if l.state != layerFired {
		l.mu.Unlock()
		return
	}
	l.state = layerDone
	l.mu.Unlock()
	l.done.Store(true)
	l.giveUp()
}

// giveUp tells Run, now or when it comes, to give up on fn: the call was
// abandoned or the Watchdog closed.
func (l *layer) giveUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = true
	if l.abandon != nil {
		close(l.abandon)
	}
}

// await returns the channel that is closed when Run must give up on fn,
// made on first use.
func (l *layer) await() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.abandon == nil {
		l.abandon = make(chan struct{})
		if l.gone {
			close(l.abandon)
		}
	}
	return l.abandon
}

// markAbandoned and exited keep Watchdog.running, the count of abandoned
// functions still running, exact whichever comes first.
func (l *layer) markAbandoned() {
	l.done.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.abandonedFlag = true
	if !l.exitedFlag && l.w != nil {
		l.w.running.Add(1)
	}
}

func (l *layer) exited() {
	l.done.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exitedFlag = true
	if l.abandonedFlag && l.w != nil {
		l.w.running.Add(-1)
	}
}

// faults is the layer's Watchdog's, or a no-op one without a session.
func (l *layer) faults() *userFaults {
	if l.w != nil {
		return l.w.faults
	}
	return &userFaults{log: zap.NewNop()}
}
