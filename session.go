package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/ilist"
	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// session states
const (
	stateReserved uint32 = iota // Resume is loading; not scheduled
	stateRunning
	// The window ended; the state says why (see endCauseLocked).
	stateStopped // Stop or Run: ErrSessionStopped
	stateClosed  // Close: ErrClosed
	stateFired   // the watchdog acted: rare.fired, or the default action's s.end
)

// Session is one watched session window. Its methods are safe for concurrent
// use. A Session is obtained from Start or Resume and is done after Stop, a
// fire or Close; a later window of the same session is a new Session.
type Session struct {
	w      *Watchdog
	id     string
	cfg    *sessionConfig // resolved policy; shared by sessions with the same Policy
	vctx   sessionCtx     // the value context under ctx: parent plus this Session
	ctx    timeCtx        // the context users see: Err says DeadlineExceeded for a time limit
	cancel context.CancelCauseFunc

	sessionStartedAt time.Time
	windowStartedAt  time.Time

	state  atomic.Uint32 // written under w.mu; an ended state says why (endCauseLocked)
	window int32
	item   sched.Item[timed]
	end    ending // why the default action ended the window; written once under w.mu

	evBuf [4]chanState     // the built-in channels' evidence (see chanAt); extra channels' are in rare
	since int64            // observed since (Unix ns, UTC): the idle floor, evidence before it does not count; guarded by w.mu
	ckpt  [2]atomic.Uint64 // the key of the last evidence checkpoint: [0] WithCheckpoints' event, [1] the lease heartbeat's (see checkpoints)
	gen   uint64           // the waiting watchdog's generation; guarded by w.mu
	rare  *sessionRare     // guarded by w.mu; nil until a session uses what it holds
}

// sessionRare is the part of a Session that most sessions never use: child
// waits, the idle and shadow rules' memory, custom actions, deadline
// layers, the waiting watchdog and RunPhase. It is allocated on first use,
// under w.mu, so a plain session stays small.
type sessionRare struct {
	evx     []chanState                  // the policy's extra channels' evidence; set before the session is shared, then only its atomics change
	fired   *VerdictError                // why the window ended, in stateFired; guarded by w.mu
	lost    error                        // why the window ended in stateClosed when another owner took it over (disown); guarded by w.mu
	waits   childWaits                   // guarded by w.mu
	rules   decide.State                 // the rules' memory; guarded by w.mu
	acting  bool                         // a decision waits for the action goroutine; guarded by w.mu
	failed  int                          // consecutive failures of the action; guarded by w.mu
	calls   ilist.List[layer, callLinks] // in-flight handlers with a deadline, oldest first; guarded by w.mu
	waiter  *waiter                      // armed waiting watchdog; guarded by w.mu
	attempt *phaseAttempt                // running RunPhase attempt; guarded by w.mu

	budgetFrom    time.Time                       // Policy.SupervisedOnly: the budget counts from here if later than the window's start; set before the session is shared
	continued     bool                            // a resume continues the open window (see carry)
	carried       bool                            // and carries evidence over from the window's records
	by, why       string                          // on the resume of an amended window: who amended it and why (see Amend); on a window StopBy ended, who stopped it and why (guarded by w.mu)
	stopped       string                          // StopRequested or StopAmended: how StopBy or Amend ended the window, for Run; guarded by w.mu
	callsRecorded int                             // completed handlers recorded in the window (WithCallRecords); guarded by w.mu
	progress      uint64                          // the last saved progress (SaveProgress, or carried over by Resume); guarded by w.mu once shared
	payload       json.RawMessage                 // and its payload
	graceUntil    time.Time                       // end of the startup grace (zero: none)
	backingOff    bool                            // RunPhase waits between attempts: the idle rule is suspended
	liveness      map[string]decide.LivenessState // user liveness rules' settle memory
}

// noRare stands in, read-only, for the sessionRare of a session without one.
var noRare sessionRare

// r returns s's sessionRare for reading: the zero stand-in if s has none.
// Never write through it. Called with w.mu held.
func (s *Session) r() *sessionRare {
	if s.rare != nil {
		return s.rare
	}
	return &noRare
}

// rw returns s's sessionRare for writing, allocating it on first use.
// Called with w.mu held.
func (s *Session) rw() *sessionRare {
	if s.rare == nil {
		s.rare = new(sessionRare)
	}
	return s.rare
}

// setRules stores the rules' memory. Called with w.mu held.
func (s *Session) setRules(st decide.State) {
	if s.rare == nil && st == (decide.State{}) {
		return
	}
	s.rw().rules = st
}

// clearActing records that no decision waits for the action goroutine.
// Called with w.mu held.
func (s *Session) clearActing() {
	if s.rare != nil {
		s.rare.acting = false
	}
}

// endCauseLocked is why the window ended: nil while it runs. Called with
// w.mu held.
func (s *Session) endCauseLocked() error {
	switch s.state.Load() {
	case stateStopped:
		return ErrSessionStopped
	case stateClosed:
		if s.rare != nil && s.rare.lost != nil {
			return s.rare.lost
		}
		return ErrClosed
	case stateFired:
		if s.rare != nil && s.rare.fired != nil {
			return s.rare.fired
		}
		return (*firedCause)(s) // the default action's
	}
	return nil
}

// observedSince is the idle floor as a time. Called with w.mu held.
func (s *Session) observedSince() time.Time {
	if s.since == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, s.since).UTC()
}

// config returns the resolved config of p: the one of the previous Start or
// Resume when p is the same policy (see Policy.same), a new one otherwise.
func (w *Watchdog) config(p Policy) *sessionConfig {
	if c := w.lastConfig.Load(); c != nil && c.policy.same(&p) {
		return c
	}
	c := newSessionConfig(p)
	w.lastConfig.Store(c)
	return c
}

func (w *Watchdog) newSession(ctx context.Context, id string, p Policy) *Session {
	s := &Session{w: w, id: id}
	s.vctx = sessionCtx{ctx, s}
	s.since = math.MinInt64
	s.usePolicy(p)
	inner, cancel := context.WithCancelCause(&s.vctx)
	s.ctx, s.cancel = timeCtx{inner}, cancel
	s.item.Value = s
	return s
}

// usePolicy sets the session's policy and its channels' state. Called
// before the session is shared (Touch reads rare.evx without the lock).
func (s *Session) usePolicy(p Policy) {
	s.cfg = s.w.config(p)
	s.rare = nil
	if len(p.Channels) > 0 || p.SupervisedOnly { // allocated before the session is shared: see budgetStart
		s.rare = &sessionRare{evx: make([]chanState, len(p.Channels))}
	}
	for i := range s.numChannels() {
		s.chanAt(Channel(i)).last.Store(decide.Never)
	}
}

// timeCtx is a session's or a call's context as its users see it: its Err
// is context.DeadlineExceeded when a time limit ended it, as for a context
// with a deadline, while context.Cause stays the typed verdict.
type timeCtx struct{ context.Context }

func (c *timeCtx) Err() error {
	err := c.Context.Err()
	if err == context.Canceled && timeLimit(context.Cause(c.Context)) {
		return context.DeadlineExceeded
	}
	return err
}

// timeLimit reports whether cause is the verdict of a time limit: every
// built-in rule and deadline layer; not a liveness rule of the user's.
func timeLimit(cause error) bool {
	return errors.Is(cause, ErrWallClockExceeded) || errors.Is(cause, ErrSessionCeilingExceeded) ||
		errors.Is(cause, ErrChildrenWaitExceeded) || errors.Is(cause, ErrIdleExceeded) || errors.Is(cause, ErrDeadlineExceeded)
}

// sessionCtx is the session's value context, kept inside the Session to save
// an allocation: it carries the Session for FromContext and delegates
// everything else to the context given to Start or Resume.
type sessionCtx struct {
	context.Context // the parent
	s               *Session
}

func (c *sessionCtx) Value(key any) any {
	if key == (sessionKey{}) {
		return c.s
	}
	return c.Context.Value(key)
}

func (c *sessionCtx) String() string { return "watchdog.Session(" + c.s.id + ")" }

// Deadline reports the earliest of the parent's deadline and the session's
// absolute limits known in advance (see Session.Context).
func (c *sessionCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if own, has := c.s.limitDeadline(); has && (!ok || own.Before(d)) {
		d, ok = own, true
	}
	return d, ok
}

// limitDeadline is the earliest absolute limit of s's window known in
// advance, on the wall clock, for Deadline: the wall-clock budget (unless
// it counts supervised time only) and the session ceiling, among the rules
// in act mode. None under a Clock other than the real one, whose instants
// time.Until cannot compare with.
func (s *Session) limitDeadline() (time.Time, bool) {
	if s.w.rt == nil || s.cfg == nil || s.w.action != nil {
		return time.Time{}, false // a custom action may leave the context live past the limit
	}
	l := s.cfg.limits
	var d time.Time
	if !l.Shadow.Has(decide.RuleWallClock) && !s.cfg.policy.SupervisedOnly {
		d = s.windowStartedAt.Add(l.WallClock)
	}
	if l.SessionCeiling > 0 && !l.Shadow.Has(decide.RuleSessionCeiling) {
		if c := s.sessionStartedAt.Add(l.SessionCeiling); d.IsZero() || c.Before(d) {
			d = c
		}
	}
	if d.IsZero() {
		return d, false
	}
	return s.w.wallNow(d), true
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Context returns the session's context. It is cancelled when the window ends:
// with a *VerdictError cause when the watchdog fires, ErrSessionStopped after
// Stop, ErrClosed after Close. It is also cancelled, with the parent's cause,
// when the context passed to Start or Resume ends; that does not end the
// window (the session stays watched until Stop, a fire or Close; Run stops it
// with StopCanceled).
//
// Its Deadline method reports the earliest absolute limit known in advance:
// the parent's deadline, the window's wall-clock budget (Deadline) and the
// session ceiling, among the rules in act mode (a budget of supervised time
// has none), so that deadline-aware clients (net/http, gRPC, pgx) can size
// and forward their own timeouts. Only with the real Clock (also inside a
// testing/synctest bubble), and without WithAction (an action may keep the
// session running past the limit): otherwise, for example under a
// *clock.Mock, it reports the parent's deadline alone, because those
// clients compare the deadline with the real clock.
//
// When a time limit ends it (every built-in rule, a deadline layer), its Err
// is context.DeadlineExceeded, as for a context whose deadline passed, and
// context.Cause is the *VerdictError; a stop, Close and a liveness rule of
// your own leave Err context.Canceled. Contexts derived with WithValue
// report the same Err; those derived with WithCancel, WithTimeout or
// WithDeadline that end because it ended report context.Canceled (Go's
// context package passes a cancellation down as Canceled), with the same
// cause.
func (s *Session) Context() context.Context { return &s.ctx }

// Window returns the window number, from 1.
func (s *Session) Window() int { return int(s.window) }

// StartedAt returns session_started_at: the session's original start, kept
// across resumes and restarts.
func (s *Session) StartedAt() time.Time { return s.w.wallNow(s.sessionStartedAt) }

// budgetStart is when the window's wall-clock budget counts from: its
// start, or later under Policy.SupervisedOnly (see carry). Lock-free: a
// SupervisedOnly session's rare is allocated before it is shared (see
// usePolicy), and budgetFrom is not written after.
func (s *Session) budgetStart() time.Time {
	if s.cfg.policy.SupervisedOnly && s.rare.budgetFrom.After(s.windowStartedAt) {
		return s.rare.budgetFrom
	}
	return s.windowStartedAt
}

// Deadline returns the last instant the window may run: its start plus its
// wall-clock budget (Policy.WallClock, defaults applied), plus the
// unsupervised time a resume added under Policy.SupervisedOnly. The
// watchdog fires at the first instant after it.
func (s *Session) Deadline() time.Time {
	return s.w.wallNow(s.budgetStart().Add(s.cfg.limits.WallClock))
}

// Stop ends the session's window normally: it records a stop event (reason
// "completed"), unschedules the session and cancels its context with cause
// ErrSessionStopped. After Stop nothing can fire for the window.
//
// Stop returns nil when it ended the window and on every later call after
// that. If the window had already ended otherwise it returns that cause: the
// *VerdictError when the watchdog fired first, ErrClosed after Close, an
// error wrapping ErrAlreadyWatched when another member of a fleet took the
// window over (its Run reports StopOwnerLost).
//
// With a store that arbitrates (see Arbiter), Stop waits for the store's
// answer, bounded by the context the session was started or resumed with
// (past it, Stop returns nil and the stop is recorded when the store takes
// it). If another Watchdog ended the window first, Stop returns an error
// wrapping ErrAlreadyDecided (ErrAlreadyWatched if another owner holds the
// window) and the winner's cause (a *VerdictError for a cancel), the
// session's context ends with that error, and Run's Result reports the
// winner's verdict.
func (s *Session) Stop() error {
	_, err := s.stop(StopCompleted)
	return err
}

// StopBy ends the session's window on purpose, like Stop, for a reason
// other than its work being done: an operator's stop or a parent's
// decision. Its stop event has reason StopRequested and records by (who)
// and why, each text of 1 to 1,024 bytes (see Start); the session's context
// ends with a cause that wraps ErrSessionStopped and names them, and Run's
// Result reports StopRequested, resumable. It returns an error wrapping
// ErrInvalidArgument for bad input (the window goes on), and otherwise what
// Stop returns.
func (s *Session) StopBy(by, why string) error {
	if s == nil {
		return fmt.Errorf("%w: nil session", ErrInvalidArgument)
	}
	if err := checkBy(by, why); err != nil {
		return err
	}
	_, err := s.stop(StopRequested, by, why)
	return err
}

// checkBy validates who and why of StopBy and Amend.
func checkBy(by, why string) error {
	for _, f := range [...]struct{ name, v string }{{"by", by}, {"why", why}} {
		if err := checkName(f.name, f.v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	return nil
}

// afterEnd is what a call on a window that has ended returns: nil after
// a stop (Stop, StopBy, Amend), else why it ended.
func afterEnd(cause error) error {
	if errors.Is(cause, ErrSessionStopped) {
		return nil
	}
	return cause
}

// stop ends the window with a stop event carrying code (and, from StopBy,
// who and why), unless it already ended. It reports whether this call
// ended it, and the earlier cause if not.
func (s *Session) stop(code string, byWhy ...string) (bool, error) {
	w := s.w
	now := w.now()
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		return false, afterEnd(cause)
	}
	s.state.Store(stateStopped)
	w.sessions.Del(s)
	w.heap.Remove(&s.item)
	s.dropLocked()
	e := s.event(KindStop, now)
	e.Reason = code
	cause := ErrSessionStopped
	if code == StopRequested || code == StopAmended { // Run reports it
		r := s.rw()
		r.stopped = code
		if len(byWhy) == 2 {
			r.by, r.why = byWhy[0], byWhy[1]
			e.By, e.Why = r.by, r.why
			cause = fmt.Errorf("%w by %s: %s", ErrSessionStopped, r.by, r.why)
		}
	}
	var op *opening
	if w.openings != nil { // a store that arbitrates: learn whether the stop wins
		e.ID = w.newID()
		op = w.await(e.ID, s)
	}
	w.record(nil, e)
	w.mu.Unlock()
	if op != nil {
		if lost := w.stopOutcome(s, op, e.ID); lost != nil {
			s.cancel(lost)
			return false, lost
		}
	}
	s.cancel(cause)
	if ce := w.log.Check(zap.DebugLevel, "watchdog: session stopped"); ce != nil { // no fields built when disabled
		ce.Write(zap.String("session_id", s.id), zap.Int("window", int(s.window)), zap.String("stop_reason_code", code), zap.String("by", e.By), zap.String("why", e.Why))
	}
	return true, nil
}

// Result is the envelope Run returns: how a session window ended.
type Result struct {
	// SessionID is the session id.
	SessionID string
	// StopReasonCode is one of the Stop constants, or the code of the
	// verdict that ended the window (VerdictError.StopReasonCode).
	StopReasonCode string
	// Resumable reports whether resuming the session makes sense: false
	// after StopCompleted (the work is done) and after the session ceiling
	// (it counts from the session's start, so a resumed window would be
	// cancelled again at once); true otherwise. Resume itself accepts any
	// session the store knows.
	Resumable bool
	// Window is the window that ended.
	Window int
	// Elapsed is how long the window ran, on the Watchdog's clock.
	Elapsed time.Duration
}

// MarshalJSON encodes r with snake_case names; elapsed_seconds is in seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		SessionID      string  `json:"session_id"`
		StopReasonCode string  `json:"stop_reason_code"`
		Resumable      bool    `json:"resumable"`
		Window         int     `json:"window"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
	}{r.SessionID, r.StopReasonCode, r.Resumable, r.Window, r.Elapsed.Seconds()})
}

// Run calls fn with the session's context, waits for it to return, ends the
// window and reports how it ended. fn is never abandoned: it should return
// when its context is done.
//
// When the watchdog fired, the result carries the verdict's code (for example
// "watchdog_wall_clock_exceeded") and the error is the *VerdictError (joined with fn's
// error if fn returned one of its own). Otherwise Run stops the session with
// StopCompleted (fn returned nil; the error is nil), StopCanceled (the
// caller's context ended) or StopFailed, and returns fn's error. A panic in fn
// stops the session with StopFailed and is re-raised.
func (s *Session) Run(fn func(ctx context.Context) error) (res Result, err error) {
	res = Result{SessionID: s.id, Window: int(s.window)}
	if fn == nil {
		s.stop(StopFailed)
		return res, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	panicked := true
	defer func() {
		if panicked {
			s.stop(StopFailed)
		}
	}()
	fnErr := fn(&s.ctx)
	panicked = false

	code := StopCompleted
	switch {
	case fnErr == nil:
	case s.vctx.Context.Err() != nil:
		code = StopCanceled
	default:
		code = StopFailed
	}
	won, cause := s.stop(code)
	res.Elapsed = s.w.now().Sub(s.windowStartedAt)
	if won {
		res.StopReasonCode = code
		res.Resumable = code != StopCompleted
		return res, fnErr
	}
	res.Resumable = true
	var v *VerdictError
	switch {
	case cause == nil: // Stop, StopBy or Amend ended the window while fn ran
		res.StopReasonCode = StopCompleted
		s.w.mu.Lock()
		if s.rare != nil && s.rare.stopped != "" {
			res.StopReasonCode = s.rare.stopped
		}
		s.w.mu.Unlock()
		res.Resumable = res.StopReasonCode != StopCompleted
		return res, fnErr
	case errors.As(cause, &v):
		res.StopReasonCode = v.StopReasonCode()
		res.Resumable = v.Resumable()
		res.Elapsed = s.w.fromRecord(v.FiredAt).Sub(s.windowStartedAt)
	case errors.Is(cause, ErrClosed):
		res.StopReasonCode = StopWatchdogClosed
	case errors.Is(cause, ErrAlreadyWatched): // another owner took the window over
		res.StopReasonCode = StopOwnerLost
	default:
		res.StopReasonCode = StopCanceled
	}
	if fnErr != nil && !errors.Is(fnErr, context.Canceled) && !errors.Is(fnErr, context.DeadlineExceeded) && !errors.Is(fnErr, cause) {
		return res, errors.Join(cause, fnErr)
	}
	return res, cause
}
