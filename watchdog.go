package watchdog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/index"
	"github.com/sessionwatchdog/watchdog/internal/record"
	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// Reasons recorded on decision and cancel events, one per rule.
const (
	// ReasonWallClockExceeded: the window outran its wall-clock budget.
	ReasonWallClockExceeded = decide.ReasonWallClock
	// ReasonSessionCeilingExceeded: the session outran
	// Policy.SessionCeiling (SESSION_CEILING_EXCEEDED).
	ReasonSessionCeilingExceeded = decide.ReasonSessionCeiling
	// ReasonChildrenPersistTooLong: the window waited on children longer
	// than Policy.ChildrenWaitCeiling (CHILDREN_PERSIST_TOO_LONG).
	ReasonChildrenPersistTooLong = decide.ReasonChildrenWait
	// ReasonNoOutputDeadline: stdout was silent past Policy.IdleWindow
	// with no fresher evidence elsewhere (NO_OUTPUT_DEADLINE, HARD_STOP).
	ReasonNoOutputDeadline = decide.ReasonNoOutput
)

// Stop reason codes of the result envelope (Result.StopReasonCode) and of
// terminal events (Event.StopReasonCode).
const (
	// StopCompleted: the session's function returned nil (or Stop was
	// called). Not resumable.
	StopCompleted = "completed"
	// StopFailed: the session's function returned an error of its own.
	StopFailed = "failed"
	// StopCanceled: the caller's context ended the session.
	StopCanceled = "canceled"
	// StopWallClockExceeded: the watchdog cancelled the window because
	// its wall-clock budget ran out. Resumable: a resume opens a fresh window.
	StopWallClockExceeded = "watchdog_wall_clock_exceeded"
	// StopIdleTimeout: the idle rule cancelled the window (stdout silent
	// past the idle window, no fresher evidence). Resumable, and
	// recoverable: a recovery layer may retry.
	StopIdleTimeout = "watchdog_idle_timeout"
	// StopSessionCeilingExceeded: the session outran its ceiling. Not
	// resumable: the ceiling counts from the session's start.
	StopSessionCeilingExceeded = "watchdog_session_ceiling_exceeded"
	// StopChildrenPersistTooLong: the window waited on children past the
	// ceiling. Resumable (a new window starts a new account).
	StopChildrenPersistTooLong = "watchdog_children_persist_too_long"
	// StopWatchdogClosed: the Watchdog was closed while the session ran. No
	// terminal event is recorded, so a resume continues the same window.
	StopWatchdogClosed = "watchdog_closed"
)

// Watchdog supervises many sessions with one scheduler goroutine driven by a
// deadline heap: no goroutine, ticker or timer per session. Create it with New
// and release it with Close. All methods are safe for concurrent use.
type Watchdog struct {
	clock      Clock
	store      EventStore
	log        *zap.Logger
	rec        *record.Recorder[entry, Event]
	act        *actor
	action     ActionFunc
	obs        Observer
	abandoned  atomic.Int64 // handler goroutines abandoned at deadline + grace
	running    atomic.Int64 // handler goroutines still running after abandonment
	resolution time.Duration
	coarse     coarseClock

	ids record.IDs

	lastConfig atomic.Pointer[sessionConfig] // the latest policy's, shared while it repeats

	mu       sync.Mutex // guards sessions, heap, closed
	sessions index.Index[Session]
	heap     sched.Heap[timed]
	layers   map[*layer]struct{} // in-flight deadline layers
	popped   []timed             // scratch of pass
	ef       effects             // scratch of pass; owned by the scheduler goroutine
	closed   bool
	scratch  [MaxChannels]decide.Channel // snapshotLocked's buffer; guarded by mu

	timerMu sync.Mutex   // guards timer, rt's arming, armed, armedAt; taken before mu, never inside it
	timer   *clock.Timer // the pending AfterFunc of a Clock other than the real one
	rt      *time.Timer  // the real clock's one timer (nil for other clocks); its channel wakes the scheduler
	bs      *backstop    // rt's backstop (nil for other clocks and off Linux)
	armed   bool
	armedAt int64

	wakeCh  chan struct{}
	checkCh chan chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	ws     *workspaceMonitor             // started on first WatchWorkspace; guarded by mu
	wsHook func(*Session, fsnotifyEvent) // tests only
}

// New returns a running Watchdog. Without options it records to a private
// MemoryStore, reads the real clock and logs nothing. It starts a scheduler,
// a recorder and an action goroutine; with the real clock on Linux, also a
// timerfd (one file descriptor) and the goroutine that reads it, a backstop
// for the scheduler's timer (none inside a testing/synctest bubble). Close
// releases all of them.
func New(opts ...Option) *Watchdog {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.store == nil {
		c.store = NewMemoryStore()
	}
	if c.clock == nil {
		c.clock = clock.New()
	}
	var rt *time.Timer
	var bs *backstop
	if reflect.TypeOf(c.clock) == realClockType {
		// The real clock: one timer reset in place, whose channel wakes the
		// scheduler goroutine itself, instead of an AfterFunc (a timer, a
		// wrapper and a goroutine) per arming.
		rt = time.NewTimer(time.Hour)
		rt.Stop()
		bs = newBackstop()
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if c.idPrefix == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.idPrefix = hex.EncodeToString(b[:]) + "-"
	}
	w := &Watchdog{
		clock:      c.clock,
		store:      c.store,
		log:        c.log,
		action:     c.action,
		resolution: c.resolution,
		ids:        record.IDs{Prefix: c.idPrefix},
		layers:     make(map[*layer]struct{}),
		obs:        c.obs,
		rt:         rt,
		bs:         bs,
		wakeCh:     make(chan struct{}, 1),
		checkCh:    make(chan chan struct{}),
		sessions: index.Index[Session]{
			Key:  func(s *Session) string { return s.id },
			Slot: func(s *Session) *int32 { return &s.item.Aux },
		},
		done: make(chan struct{}),
	}
	w.act = newActor(w)
	var one [1]Event // Append's argument: the recorder appends from one goroutine at a time
	w.rec = record.New(record.Config[entry, Event]{
		Append: func(ctx context.Context, e Event) error {
			one[0] = e
			err := w.store.Append(ctx, one[:]...)
			one[0] = Event{}
			return err
		},
		Expand:   w.entryEvents,
		Lane:     entryLane,
		Classify: classifyAppendError,
		Name:     eventName,
		Recorded: c.obs.OnEvent,
		Clock:    c.clock,
		Log:      c.log,
		RetryMin: c.retryMin,
		RetryMax: c.retryMax,
	})
	w.coarse.now.Store(toNanos(w.clock.Now()))
	w.wg.Add(2)
	go func() { defer w.wg.Done(); w.rec.Run() }()
	go func() { defer w.wg.Done(); w.schedule() }()
	go w.act.run() // Close waits for it through act.done, bounded by its ctx
	return w
}

// realClockType is the type of benbjohnson/clock's real clock (clock.New).
var realClockType = reflect.TypeOf(clock.New())

// Store returns the EventStore the Watchdog records to.
func (w *Watchdog) Store() EventStore { return w.store }

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
	ctx    context.Context
	cancel context.CancelCauseFunc

	sessionStartedAt time.Time
	windowStartedAt  time.Time

	state  atomic.Uint32 // written under w.mu; an ended state says why (endCauseLocked)
	window int32
	item   sched.Item[timed]
	end    ending // why the default action ended the window; written once under w.mu

	evBuf [4]chanState // the built-in channels' evidence (see chanAt); extra channels' are in rare
	since int64        // observed since (Unix ns, UTC): the idle floor, evidence before it does not count; guarded by w.mu
	gen   uint64       // the waiting watchdog's generation; guarded by w.mu
	rare  *sessionRare // guarded by w.mu; nil until a session uses what it holds
}

// sessionRare is the part of a Session that most sessions never use: child
// waits, the idle and shadow rules' memory, custom actions, deadline
// layers, the waiting watchdog and RunPhase. It is allocated on first use,
// under w.mu, so a plain session stays small.
type sessionRare struct {
	evx     []chanState   // the policy's extra channels' evidence; set before the session is shared, then only its atomics change
	fired   *VerdictError // why the window ended, in stateFired; guarded by w.mu
	waits   childWaits    // guarded by w.mu
	rules   decide.State  // the rules' memory; guarded by w.mu
	acting  bool          // a decision waits for the action goroutine; guarded by w.mu
	bounded []*layer      // in-flight handlers with a deadline; guarded by w.mu
	waiter  *waiter       // armed waiting watchdog; guarded by w.mu
	attempt *phaseAttempt // running RunPhase attempt; guarded by w.mu

	graceUntil time.Time                       // end of the startup grace (zero: none)
	backingOff bool                            // RunPhase waits between attempts: the idle rule is suspended
	liveness   map[string]decide.LivenessState // user liveness rules' settle memory
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

// sessionConfig is what a session needs from its Policy, resolved once.
// Sessions started with the same Policy share one (see Watchdog.config), so
// a fleet of sessions under one policy does not pay for it per session. It
// is never modified after it is built.
type sessionConfig struct {
	policy          Policy // as given, recorded on start and resume events
	limits          decide.Limits
	grace           time.Duration // Policy.HandlerGrace, resolved
	recoveryBudget  int           // resolved retries
	recoveryBackoff time.Duration // resolved
}

func newSessionConfig(p Policy) *sessionConfig {
	p = p.clone()
	c := &sessionConfig{policy: p, limits: p.limits(), grace: p.HandlerGrace,
		recoveryBudget: p.RecoveryBudget, recoveryBackoff: p.RecoveryBackoff}
	if c.grace == 0 {
		c.grace = DefaultHandlerGrace
	}
	switch c.recoveryBudget {
	case 0:
		c.recoveryBudget = DefaultRecoveryBudget
	case NoRetries:
		c.recoveryBudget = 0
	}
	if c.recoveryBackoff == 0 {
		c.recoveryBackoff = DefaultRecoveryBackoff
	}
	return c
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

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Context returns the session's context. It is cancelled when the window ends:
// with a *VerdictError cause when the watchdog fires, ErrSessionStopped after
// Stop, ErrClosed after Close. It is also cancelled, with the parent's cause,
// when the context passed to Start or Resume ends; that does not end the
// window (the session stays watched until Stop, a fire or Close; Run stops it
// with StopCanceled).
func (s *Session) Context() context.Context { return s.ctx }

// Window returns the window number, from 1.
func (s *Session) Window() int { return int(s.window) }

// StartedAt returns session_started_at: the session's original start, kept
// across resumes and restarts.
func (s *Session) StartedAt() time.Time { return s.sessionStartedAt }

// WindowStartedAt returns when the current window began.
func (s *Session) WindowStartedAt() time.Time { return s.windowStartedAt }

// Budget returns the window's wall-clock budget (the Policy's, defaults applied).
func (s *Session) Budget() time.Duration { return s.cfg.limits.WallClock }

// Deadline returns the last instant the window may run: its start plus its
// budget. The watchdog fires at the first instant after it.
func (s *Session) Deadline() time.Time { return s.windowStartedAt.Add(s.cfg.limits.WallClock) }

func validateStart(ctx context.Context, id string, p Policy) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if id == "" {
		return fmt.Errorf("%w: empty session id", ErrInvalidArgument)
	}
	return p.Validate()
}

// Start begins watching window 1 of a new session whose session_started_at is
// startedAt, under Policy p (zero fields mean defaults), and records a start
// event. The session's context derives from ctx. The scheduler is armed for
// the session's deadline before Start returns.
//
// Start does not read the store: use it for a session id the store has no
// history for, and Resume for one it has. It returns ErrAlreadyWatched for an
// id this Watchdog already watches, ErrClosed after Close, and an error
// wrapping ErrInvalidArgument or ErrInvalidPolicy for bad input.
func (w *Watchdog) Start(ctx context.Context, id string, startedAt time.Time, p Policy) (*Session, error) {
	if err := validateStart(ctx, id, p); err != nil {
		return nil, err
	}
	if startedAt.IsZero() {
		return nil, fmt.Errorf("%w: session %q: zero session_started_at", ErrInvalidArgument, id)
	}
	s := w.newSession(ctx, id, p)
	s.sessionStartedAt = startedAt.UTC()
	s.windowStartedAt = s.sessionStartedAt
	s.window = 1
	if err := w.activate(s, KindStart, false); err != nil {
		s.cancel(err)
		return nil, err
	}
	return s, nil
}

// Resume re-attaches a session recorded in the store: it reads
// session_started_at and the last window from the store (and from this
// Watchdog's events not recorded yet), so the budget survives a process
// restart with no extra state. If the last window has no terminal event the
// session continues it, with its original start; if it ended (a cancel or a
// stop) Resume opens the next window, starting now. It records a resume event
// and arms the scheduler before it returns.
//
// Resume returns ErrUnknownSession when the store has no event for id, the
// store's error when Load fails, ErrAlreadyWatched, ErrClosed, or an error
// wrapping ErrInvalidArgument or ErrInvalidPolicy.
func (w *Watchdog) Resume(ctx context.Context, id string, p Policy) (*Session, error) {
	if err := validateStart(ctx, id, p); err != nil {
		return nil, err
	}
	s := w.newSession(ctx, id, p)
	if err := w.reserve(s); err != nil {
		s.cancel(err)
		return nil, err
	}
	// Pending events first: an event that leaves the queue after this
	// point is in the store when Load reads it.
	pending := w.rec.Pending(id)
	loaded, err := w.store.Load(ctx, id)
	if err == nil && len(loaded) == 0 && len(pending) == 0 {
		err = fmt.Errorf("%w: %q", ErrUnknownSession, id)
	} else if err != nil {
		err = fmt.Errorf("watchdog: resume %q: load: %w", id, err)
	}
	if err != nil {
		w.release(s)
		s.cancel(err)
		return nil, err
	}
	seen := make(map[string]bool, len(loaded))
	last, ended := 0, false
	var lastWindowStart time.Time
	for _, evs := range [][]Event{loaded, pending} {
		for _, e := range evs {
			if seen[e.ID] {
				continue
			}
			seen[e.ID] = true
			if s.sessionStartedAt.IsZero() {
				s.sessionStartedAt = e.SessionStartedAt.UTC()
			}
			if e.Window > last {
				last, ended, lastWindowStart = e.Window, false, e.WindowStartedAt
			}
			if e.Window == last && e.Terminal() {
				ended = true
			}
		}
	}
	if s.sessionStartedAt.IsZero() {
		w.release(s)
		err := fmt.Errorf("%w: resume %q: the store's events carry no session_started_at", ErrInvalidEvent, id)
		s.cancel(err)
		return nil, err
	}
	if ended || last == 0 {
		s.window = int32(last + 1)
		s.windowStartedAt = w.clock.Now().UTC()
	} else {
		s.window = int32(last)
		s.windowStartedAt = lastWindowStart.UTC()
	}
	if err := w.activate(s, KindResume, true); err != nil {
		s.cancel(err)
		return nil, err
	}
	return s, nil
}

func (w *Watchdog) newSession(ctx context.Context, id string, p Policy) *Session {
	s := &Session{w: w, id: id, cfg: w.config(p)}
	s.vctx = sessionCtx{ctx, s}
	s.since = math.MinInt64
	if len(p.Channels) > 0 {
		// Touch reads rare.evx without the lock: rare is set here, before
		// the session is shared, and never replaced.
		s.rare = &sessionRare{evx: make([]chanState, len(p.Channels))}
	}
	for i := range s.numChannels() {
		s.chanAt(Channel(i)).last.Store(decide.Never)
	}
	s.ctx, s.cancel = context.WithCancelCause(&s.vctx)
	s.item.Value = s
	return s
}

type sessionKey struct{}

// FromContext returns the Session whose context ctx is or derives from, or
// nil. Handlers use it to record evidence without plumbing the Session.
func FromContext(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// reserve claims id for a Resume that is loading.
func (w *Watchdog) reserve(s *Session) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.sessions.Get(s.id) != nil {
		return fmt.Errorf("%w: %q", ErrAlreadyWatched, s.id)
	}
	w.sessions.Put(s)
	return nil
}

func (w *Watchdog) release(s *Session) {
	w.mu.Lock()
	w.sessions.Del(s)
	w.mu.Unlock()
}

// activate registers s (already reserved when reserved is true), schedules
// its deadline, enqueues its lifecycle event and arms the timer.
func (w *Watchdog) activate(s *Session, kind string, reserved bool) error {
	now := w.clock.Now()
	w.coarse.refresh(toNanos(now))
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if cur := w.sessions.Get(s.id); cur != nil && (!reserved || cur != s) {
		w.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrAlreadyWatched, s.id)
	} else if cur == nil {
		w.sessions.Put(s)
	}
	s.state.Store(stateRunning)
	s.since = toNanos(now)
	if g := s.cfg.limits.StartupGrace; g > 0 {
		s.rw().graceUntil = now.UTC().Add(g)
	}
	v := decide.Decide(s.cfg.limits, s.snapshotLocked(), now)
	due := toNanos(v.Next)
	if v.Action != decide.Continue || v.Record || v.Next.IsZero() {
		due = toNanos(now) // already due: the scheduler decides it
	}
	w.heap.Push(&s.item, due)
	e := s.event(kind, now)
	e.Policy = &s.cfg.policy // shared, never modified
	w.rec.Push(entry{ev: e, seq: w.ids.Next()})
	w.mu.Unlock()
	w.armIfEarlier(due)
	return nil
}

// Stop ends the session's window normally: it records a stop event (reason
// "completed"), unschedules the session and cancels its context with cause
// ErrSessionStopped. After Stop nothing can fire for the window.
//
// Stop returns nil when it ended the window and on every later call after
// that. If the window had already ended otherwise it returns that cause: the
// *VerdictError when the watchdog fired first, ErrClosed after Close.
func (s *Session) Stop() error {
	_, err := s.stop(StopCompleted)
	return err
}

// stop ends the window with a stop event carrying code, unless it already
// ended. It reports whether this call ended it, and the earlier cause if not.
func (s *Session) stop(code string) (bool, error) {
	w := s.w
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		if errors.Is(cause, ErrSessionStopped) {
			return false, nil
		}
		return false, cause
	}
	s.state.Store(stateStopped)
	w.sessions.Del(s)
	w.heap.Remove(&s.item)
	s.dropWaiterLocked()
	e := s.event(KindStop, w.clock.Now())
	e.Reason, e.StopReasonCode = code, code
	w.rec.Push(entry{ev: e, seq: w.ids.Next()})
	w.mu.Unlock()
	s.cancel(ErrSessionStopped)
	if ce := w.log.Check(zap.DebugLevel, "watchdog: session stopped"); ce != nil { // no fields built when disabled
		ce.Write(zap.String("session_id", s.id), zap.Int("window", int(s.window)), zap.String("stop_reason_code", code))
	}
	return true, nil
}

// Result is the envelope Run returns: how a session window ended.
type Result struct {
	// SessionID is the session id.
	SessionID string
	// StopReasonCode is one of the Stop constants.
	StopReasonCode string
	// Resumable reports whether Resume can continue the session: true for
	// every ending but StopCompleted.
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

// Run starts session id now (see Start) and runs fn under it (see
// Session.Run). It is the wrapper for a pipeline loop: fn should return when
// its context is done.
func (w *Watchdog) Run(ctx context.Context, id string, p Policy, fn func(ctx context.Context) error) (Result, error) {
	if fn == nil {
		return Result{SessionID: id}, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	s, err := w.Start(ctx, id, w.clock.Now(), p)
	if err != nil {
		return Result{SessionID: id}, err
	}
	return s.Run(fn)
}

// Run calls fn with the session's context, waits for it to return, ends the
// window and reports how it ended. fn is never abandoned: it should return
// when its context is done.
//
// When the watchdog fired, the result carries the verdict's code (for example
// StopWallClockExceeded) and the error is the *VerdictError (joined with fn's
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
	fnErr := fn(s.ctx)
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
	res.Elapsed = s.w.clock.Now().Sub(s.windowStartedAt)
	if won {
		res.StopReasonCode = code
		res.Resumable = code != StopCompleted
		return res, fnErr
	}
	res.Resumable = true
	var v *VerdictError
	switch {
	case errors.As(cause, &v):
		res.StopReasonCode = v.StopReasonCode()
		res.Resumable = v.Resumable()
		res.Elapsed = v.FiredAt.Sub(s.windowStartedAt)
	case errors.Is(cause, ErrClosed):
		res.StopReasonCode = StopWatchdogClosed
	default:
		res.StopReasonCode = StopCanceled
	}
	if fnErr != nil && !errors.Is(fnErr, context.Canceled) && !errors.Is(fnErr, cause) {
		return res, errors.Join(cause, fnErr)
	}
	return res, cause
}

// Check is the settle point for tests on a fake clock: when it returns nil,
// every verdict due at or before the clock's now has been decided and
// applied, and every event whose recording is due has been attempted
// (events whose Append failed stay queued for retry). Advance a
// *clock.Mock, then call Check; late or duplicate timer callbacks from the
// mock are harmless. Check returns ErrClosed after Close, or ctx's error.
func (w *Watchdog) Check(ctx context.Context) error {
	for _, f := range []func(context.Context) error{
		func(ctx context.Context) error { return record.RoundTrip(ctx, w.checkCh, w.done) },
		w.act.Barrier,
		w.rec.Barrier,
	} {
		if err := f(ctx); err != nil {
			if errors.Is(err, record.ErrStopped) {
				return ErrClosed
			}
			return err
		}
	}
	return nil
}

// Close stops the scheduler, cancels the context of every session still
// watched with cause ErrClosed (recording no terminal event, so each can be
// resumed where it was), makes a last attempt to record every pending event
// until ctx ends, and waits for every goroutine the Watchdog started. Callers
// blocked in Within or Call are released with ErrClosed; a handler function
// that ignores its context is user code and is not waited for (see
// AbandonedHandlers). It
// returns an error wrapping ErrNotRecorded that names each event it could
// not record. Later calls do nothing but wait for the first one and return
// its result.
func (w *Watchdog) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		if ctx == nil {
			ctx = context.Background()
		}
		w.mu.Lock()
		w.closed = true
		live := w.sessions.All()
		for _, s := range live {
			s.state.Store(stateClosed)
			w.heap.Remove(&s.item)
			s.dropWaiterLocked()
		}
		w.sessions.Reset()
		var layers []*layer
		for l := range w.layers {
			if l.state != layerDone {
				l.state, l.cause = layerDone, ErrClosed
				layers = append(layers, l)
			}
		}
		clear(w.layers)
		w.mu.Unlock()
		for _, l := range layers { // release callers waiting on handlers
			l.cancel(ErrClosed)
			close(l.abandon)
		}

		close(w.done)
		w.stopTicks()
		actErr := w.act.close(ctx)
		w.timerMu.Lock()
		w.armLocked(0, false)
		if w.bs != nil {
			w.bs.close()
		}
		w.timerMu.Unlock()
		for _, s := range live {
			s.cancel(ErrClosed)
		}
		w.mu.Lock()
		ws := w.ws
		w.mu.Unlock()
		if ws != nil {
			ws.close()
		}
		w.closeErr = errors.Join(actErr, w.rec.Close(ctx, ErrNotRecorded))
		w.wg.Wait()
		if w.closeErr != nil {
			w.log.Error("watchdog: closed with events not recorded", zap.Error(w.closeErr))
		}
	})
	return w.closeErr
}

var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// toNanos converts t to Unix nanoseconds, saturating outside the int64 range.
func toNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanos):
		return math.MinInt64
	case t.After(maxNanos):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// NextDeadline returns the earliest instant at which a verdict is due for
// one of the watched sessions, and false when no session is watched. Test
// helpers use it to step a fake clock from deadline to deadline.
func (w *Watchdog) NextDeadline() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	top := w.heap.Peek()
	if top == nil {
		return time.Time{}, false
	}
	return time.Unix(0, top.Due).UTC(), true
}
