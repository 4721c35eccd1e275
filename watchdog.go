package watchdog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/bound"
	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/ilist"
	"github.com/sessionwatchdog/watchdog/internal/index"
	"github.com/sessionwatchdog/watchdog/internal/kills"
	"github.com/sessionwatchdog/watchdog/internal/record"
	"github.com/sessionwatchdog/watchdog/internal/sched"
	"github.com/sessionwatchdog/watchdog/internal/workspace"
)

// Watchdog supervises many sessions with one scheduler goroutine driven by a
// deadline heap: no goroutine, ticker or timer per session. Create it with New
// and release it with Close. All methods are safe for concurrent use.
type Watchdog struct {
	clock     Clock
	store     EventStore
	log       *zap.Logger
	rec       *record.Recorder[entry, Event]
	act       *actor
	action    func(ctx context.Context, s *Session, v *VerdictError) error
	calls     int // WithCallRecords: completed handlers recorded per window
	obs       Observer
	tickObs   *tickHook    // calls obs.OnSchedulerTick off the scheduler (nil without the hook)
	faults    *userFaults  // logs and counts panics of user code
	abandoned atomic.Int64 // handler goroutines abandoned at deadline + grace
	running   atomic.Int64 // handler goroutines still running after abandonment
	// sessions whose action failed and is retried after a backoff
	failingActions atomic.Int64

	epoch      time.Time    // the first reading of the Clock: the timeline's origin (see timeline.go)
	epochNanos int64        // epoch's wall time, Unix ns
	offset     atomic.Int64 // the wall clock's offset from the timeline, ns
	wallSkew   atomic.Int64 // tests only: added to the wall time of every reading
	storeSkew  atomic.Int64 // a fleet member's wall clock's offset from its store's, ns (see readStoreClock)

	ids record.IDs

	lastConfig atomic.Pointer[sessionConfig] // the latest policy's, shared while it repeats

	mu       sync.Mutex // guards sessions, heap, closed
	sessions index.Index[Session]
	heap     sched.Heap[timed]
	layers   ilist.List[layer, allLinks] // in-flight deadline layers
	popped   []timed                     // scratch of pass
	ef       effects                     // scratch of pass; owned by the scheduler goroutine
	closed   bool
	scratch  [maxChannels]decide.Channel // snapshotLocked's buffer; guarded by mu

	timerMu   sync.Mutex    // guards the real clock's timer (rt) and its armedAt; taken alone
	timer     *clock.Timer  // the pending AfterFunc of a Clock other than the real one
	rt        *time.Timer   // the real clock's one timer (nil for other clocks); its channel wakes the scheduler
	armedAt   atomic.Int64  // the instant the timer is armed for; MaxInt64 while unarmed or in a pass
	schedDone chan struct{} // closed when the scheduler goroutine returns

	wakeCh  chan struct{}
	wakeFn  func() // w.wake, made once: a method value allocates
	checkCh chan chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	openings *openings // with a store that arbitrates openings (see Arbiter), else nil
	owner    string    // this Watchdog's owner id (Event.Owner)
	fleet    *fleet    // with a Leaser store, else nil

	leaseRenewals, leaseFailures, adopted, disowned atomic.Int64
	ckptFrom                                        atomic.Uint64 // where the next evidence checkpoint pass starts (see checkpoints)

	ws      *workspace.Monitor     // started on first WatchWorkspace; guarded by mu
	kills   kills.Set              // Command's kills in their grace, which Close waits for
	wsHook  func(*Session, string) // tests only: after each workspace change, with its path
	armHook func()                 // tests only: called between armedAt's store and the timer's reset
}

// New returns a running Watchdog. Without options it records to a private
// MemoryStore, reads the real clock and logs nothing. It starts a scheduler
// and a recorder goroutine (and, while actions or Wait callbacks run, one
// goroutine per session that has some). Close releases all of them.
func New(opts ...Option) *Watchdog {
	c := configOf(opts)
	if c.store == nil {
		c.store = NewMemoryStore()
	}
	var rt *time.Timer
	if reflect.TypeOf(c.clock) == realClockType {
		// The real clock: one timer reset in place, whose channel wakes the
		// scheduler goroutine itself, instead of an AfterFunc (a timer, a
		// wrapper and a goroutine) per arming.
		rt = time.NewTimer(time.Hour)
		rt.Stop()
	}
	uf := c.faults
	if c.idPrefix != "" && (len(c.idPrefix) > 256 || checkText("event id prefix", c.idPrefix) != nil) {
		c.log.Error("watchdog: WithEventIDPrefix: the prefix cannot make storable ids; using a random one",
			zap.String("prefix", quoteShort(c.idPrefix)))
		c.idPrefix = ""
	}
	if c.idPrefix == "" { // readable in a live list: host-pid-random
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.idPrefix = hostPID() + hex.EncodeToString(b[:]) + "-"
	}
	w := &Watchdog{
		clock:   c.clock,
		store:   c.store,
		log:     c.log,
		faults:  uf,
		action:  c.action,
		calls:   c.calls,
		ids:     record.IDs{Prefix: c.idPrefix},
		owner:   strings.TrimSuffix(c.idPrefix, "-"),
		fleet:   newFleet(c.store, &c),
		obs:     c.obs,
		rt:      rt,
		wakeCh:  make(chan struct{}, 1),
		checkCh: make(chan chan struct{}),
		sessions: index.Index[Session]{
			Key:  func(s *Session) string { return s.id },
			Slot: func(s *Session) *int32 { return &s.item.Aux },
		},
		done:      make(chan struct{}),
		schedDone: make(chan struct{}),
	}
	w.wakeFn = w.wake
	w.act = newActor(w)
	// The MemoryStore never blocks; any other store's Append may hold up
	// the queue for appendTimeout at most, measured on the real clock (a
	// fake clock's minutes pass in microseconds of a test, during which
	// an Append that is merely descheduled would look hung).
	var timeout time.Duration
	if _, memory := w.store.(*MemoryStore); !memory && rt != nil {
		timeout = appendTimeout
	}
	var appendEach func(context.Context, []Event) []error
	if ea, ok := w.store.(EachAppender); ok {
		appendEach = ea.AppendEach
	}
	if arbitrates(w.store) {
		w.openings = &openings{waiting: make(map[string]*opening)}
	}
	w.rec = record.New(record.Config[entry, Event]{
		Append: func(ctx context.Context, events []Event) error {
			return w.store.Append(ctx, events...)
		},
		AppendEach:    appendEach,
		AppendTimeout: timeout,
		Expand:        w.entryEvents,
		Lane:          entryLane,
		Classify:      classifyAppendError,
		Panicked:      func() { uf.n.Add(1) }, // the recorder logs it with the failure
		Name:          eventName,
		Settled:       w.settled,
		Recorded:      onEventHook(c.obs.OnEvent, uf),
		Coalesce:      coalescible,
		CoalesceAt:    maxQueued,
		Clock:         c.clock,
		Log:           c.log,
		RetryMin:      c.retryMin,
		RetryMax:      c.retryMax,
	})
	w.epoch = w.clock.Now()
	w.epochNanos = toNanos(w.epoch)
	w.wg.Add(2)
	go func() { defer w.wg.Done(); w.rec.Run() }()
	w.armedAt.Store(math.MaxInt64)
	go func() { defer w.wg.Done(); defer close(w.schedDone); w.schedule() }()
	if c.obs.OnSchedulerTick != nil {
		w.tickObs = newTickHook(c.obs.OnSchedulerTick)
		go w.tickObs.run(w.done, uf)
	}
	if c.ckptEach > 0 {
		w.wg.Add(1)
		every := max(c.ckptEach, minCheckpointEvery)
		tick, t := w.after(every)
		go w.runCheckpoints(every, tick, t)
	}
	if w.fleet != nil {
		w.fleet.attempt.Store(w.epochNanos)
		w.wg.Add(1)
		go w.every(w.fleet.ttl/3, w.heartbeat)
		if w.fleet.adopt {
			w.wg.Add(1)
			go w.every(w.fleet.ttl/6, w.sweep)
		}
		if src, ok := c.store.(StopSource); ok {
			w.wg.Add(1)
			go w.serveStops(src)
		}
	}
	return w
}

// hostPID is "host-pid-": the first label of the process's host name (32
// bytes at most) and its process id.
func hostPID() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return strings.ToValidUTF8(strings.ReplaceAll(h[:min(len(h), 32)], "\x00", ""), "") + "-" + strconv.Itoa(os.Getpid()) + "-"
}

// realClockType is the type of benbjohnson/clock's real clock (clock.New).
var realClockType = reflect.TypeOf(clock.New())

// Store returns the EventStore the Watchdog records to.
func (w *Watchdog) Store() EventStore { return w.store }

// Start begins watching window 1 of a new session whose session_started_at is
// startedAt, under Policy p (zero fields mean defaults), and records a start
// event. The session's context derives from ctx. The scheduler is armed for
// the session's deadline before Start returns. Every budget of the first
// window counts from startedAt, the startup grace included: a session
// started long ago has none left. A start more than 1 s after the Clock's
// reading is refused (ErrInvalidArgument): a second tolerates one read a
// moment before from another machine's clock a little ahead (NTP keeps
// clocks milliseconds apart), and catches time.Now() under a clock.Mock,
// which reads 1970 unless set (take mock.Now()).
//
// A session id, like every name the Watchdog records (channels, rules,
// phases, handlers), is 1 to 1,024 bytes of valid UTF-8 without a NUL byte:
// what every bundled store can keep and index.
//
// Start does not read the store: use it for a session id the store has no
// history for, and Resume for one it has. With a store that arbitrates
// window openings (see Arbiter; the PostgreSQL store does) Start waits for
// the store to record the start event, bounded by ctx: it returns an error
// wrapping ErrAlreadyWatched when another Watchdog opened window 1 of id
// first, and one wrapping ctx's cause while the store does not answer (a
// start the store takes later is then ended at once by a stop event,
// reason "canceled", so no window is left open with nobody watching it).
// With any other store Start never waits for the store.
//
// Start returns ErrAlreadyWatched for an
// id this Watchdog already watches, ErrClosed after Close, an error
// wrapping ErrInvalidArgument or ErrInvalidPolicy for bad input (naming
// the value), and, while
// more than 262,144 events wait for a slow or failing store, an error
// wrapping ErrNotRecorded (back-pressure: retry once the store catches up;
// the sessions already watched keep their verdicts).
func (w *Watchdog) Start(ctx context.Context, id string, startedAt time.Time, p Policy) (*Session, error) {
	if err := validateStart(ctx, id, p); err != nil {
		return nil, err
	}
	if err := w.backPressure(id); err != nil {
		return nil, err
	}
	if startedAt.IsZero() {
		return nil, fmt.Errorf("%w: session %q: zero session_started_at", ErrInvalidArgument, id)
	}
	if !representable(startedAt) {
		return nil, fmt.Errorf("%w: session %q: session_started_at %v is outside the years 1678 to 2262 that the Watchdog can time", ErrInvalidArgument, id, startedAt)
	}
	now := w.now() // makes the wall clock's offset current; outside any lock (the Clock is user code)
	start := w.onTimeline(startedAt).UTC()
	if ahead := start.Sub(now); ahead > time.Second { // the tolerance the doc gives
		return nil, fmt.Errorf("%w: session %q: session_started_at %v is %v later than the Watchdog's Clock, which reads %v (at most 1s ahead is tolerated); under a mock Clock, take the start from that Clock (mock.Now()), not from time.Now()", ErrInvalidArgument, id, startedAt.UTC(), ahead, w.wall(now))
	}
	if err := checkWorkspaceDir(p); err != nil {
		return nil, err
	}
	s := w.newSession(ctx, id, p)
	s.sessionStartedAt = start
	s.windowStartedAt = s.sessionStartedAt
	s.window = 1
	return watchDeclared(w.open(ctx, s, KindStart, false, true))
}

type sessionKey struct{}

// FromContext returns the Session whose context ctx is or derives from, or
// nil. Handlers use it to record evidence without plumbing the Session.
func FromContext(ctx context.Context) *Session {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// activate registers s (already reserved when reserved is true), schedules
// its deadline (unless adoptOrphan ends it at once), enqueues its lifecycle
// event (unless opened: recorded already) and arms the timer.
func (w *Watchdog) activate(s *Session, kind string, reserved, opened bool, adopted *Orphan) error {
	now := w.now()
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
	if s.since == math.MinInt64 { // else set by a resume that continues the window (see carry)
		s.since = toNanos(now)
	}
	if g := s.cfg.limits.StartupGrace; g > 0 && s.windowStartedAt.Add(g).After(now) {
		// From the window's start: a resume of an open window, after a
		// restart, does not grant the grace again.
		s.rw().graceUntil = s.windowStartedAt.Add(g)
	}
	sn, at := s.snapshotLocked(now) // at is now: nobody touched s yet
	v := decide.Decide(s.cfg.limits, sn, at)
	due := toNanos(v.Next)
	if v.Action != decide.Continue || v.Record || v.Next.IsZero() {
		due = toNanos(now) // already due: the scheduler decides it
	}
	if adopted == nil || s.cfg.policy.ContinueWhenOwnerLost { // else ended at once (owner_lost): no rule decides it
		w.heap.Push(&s.item, due)
	}
	if !opened {
		e := s.event(kind, now)
		e.Policy = &s.cfg.policy // shared, never modified
		s.resumeMarks(&e)
		if adopted != nil {
			e.Reason, e.AdoptedFrom, e.OwnerLastSeen = StopOwnerLost, adopted.Owner, adopted.LastSeen.UTC()
		}
		w.record(nil, e)
	}
	w.mu.Unlock()
	w.wakeBy(due)
	return nil
}

// Run starts session id now (see Start) and runs fn under it (see
// Session.Run). It is the wrapper for a pipeline loop: fn should return when
// its context is done.
func (w *Watchdog) Run(ctx context.Context, id string, p Policy, fn func(ctx context.Context) error) (Result, error) {
	if fn == nil {
		return Result{SessionID: id}, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	s, err := w.Start(ctx, id, w.wall(w.now()), p)
	if err != nil {
		return Result{SessionID: id}, err
	}
	return s.Run(fn)
}

// Check is the settle point for tests on a fake clock: when it returns nil,
// every file change in a watched workspace made before the call has been
// delivered as evidence (on Linux; see docs/testing.md), every verdict due
// at or before the clock's now has been decided and applied, and every
// event whose recording is due has been attempted (events whose Append
// failed stay queued for retry). Advance a *clock.Mock, then call Check;
// late or duplicate timer callbacks from the mock are harmless. Check
// returns ErrClosed after Close, or ctx's error.
func (w *Watchdog) Check(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := w.syncWorkspace(ctx); err != nil {
		return err
	}
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
// resumed where it was; after a step of the wall clock, a checkpoint, so a
// restart times it on the stepped clock), waits for the kills Command began
// before it until each tree is gone and records them (a tree's end, not its
// grace's: see Command), makes a last attempt to record every pending event
// until ctx ends, and waits for every goroutine the
// Watchdog started, until ctx ends. Callers blocked in Within or Call are
// released with ErrClosed; a handler function that ignores its context is
// user code and is not waited for (see Stats).
//
// Close returns by ctx's deadline whatever user code does: a store Append,
// an Observer hook, an action or a Clock that ignores its context is left
// running, and the error names only it. The error wraps ErrNotRecorded and names
// each event Close could not record (the one a hung Append was writing may
// still be recorded) and each kill whose tree was still alive when ctx
// ended. Later calls do nothing but wait for the first one and
// return its result.
func (w *Watchdog) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		if ctx == nil {
			ctx = context.Background()
		}
		now, read := bound.Call(ctx, w.now)                           // sees a step of the wall clock; a Clock of the user's may block
		stepped := read && w.offset.Load() != 0 && w.recOffset() != 0 // and no fleet's store clock absorbed it
		w.mu.Lock()
		w.closed = true
		live := w.sessions.All()
		for _, s := range live {
			if stepped && s.state.Load() == stateRunning { // its instants on the stepped clock, for a restart
				w.record(nil, s.event(KindCheckpoint, now))
			}
			s.state.Store(stateClosed)
			w.heap.Remove(&s.item)
			s.dropLocked()
		}
		w.sessions.Reset()
		var layers []*layer
		for l := w.layers.Front(); l != nil; l = l.inAll.Next() {
			if l.state != layerDone {
				l.state, l.cause = layerDone, ErrClosed
				layers = append(layers, l)
			}
		}
		w.layers = ilist.List[layer, allLinks]{}
		w.mu.Unlock()
		for _, l := range layers { // release callers waiting on handlers
			l.cancel(ErrClosed)
			l.giveUp()
		}

		close(w.done)
		if w.fleet != nil {
			w.fleet.cancel() // ends a heartbeat or an adoption in progress
		}
		acting := w.act.stop() // waited for last: a stuck action holds up nothing else
		// Every wait below ends by ctx's end: a goroutine held by user code
		// that ignores its context (a Clock, a hook, a store, an action) is
		// named in the error and left behind.
		var stuck []string
		if !read {
			stuck = append(stuck, "a call of the Clock's Now (no checkpoint was recorded after a step of the wall clock)")
		}
		sched := bound.Done(ctx, w.schedDone)
		if w.closeTimer(sched); !sched {
			stuck = append(stuck, "the scheduler goroutine (in a call of the Clock)")
		}
		for _, s := range live {
			s.cancel(ErrClosed)
		}
		w.mu.Lock()
		ws := w.ws
		w.mu.Unlock()
		if ws != nil {
			ws.Close()
		}
		var killErr error
		if left := w.kills.Wait(ctx); len(left) > 0 {
			killErr = fmt.Errorf("watchdog: close: %w: %w: in its grace: %s", ErrNotRecorded, ctx.Err(), strings.Join(left, "; "))
		}
		recErr := w.rec.Close(ctx, ErrNotRecorded)
		all := make(chan struct{})
		go func() { w.wg.Wait(); close(all) }()
		var relErr error
		if !bound.Done(ctx, all) {
			stuck = append(stuck, "the recorder goroutine (in the store's Append or Observer.OnEvent) or the fleet goroutine (in a Leaser call)")
		} else {
			relErr = w.releaseLease(ctx) // the windows left open can be adopted at once
		}
		if w.tickObs != nil && !bound.Done(ctx, w.tickObs.done) {
			stuck = append(stuck, "Observer.OnSchedulerTick")
		}
		if !bound.Done(ctx, acting) {
			stuck = append(stuck, "an action or Wait callback")
		}
		if len(stuck) > 0 {
			relErr = errors.Join(relErr, fmt.Errorf("watchdog: close: %w: still running in user code that ignores its context: %s",
				ctx.Err(), strings.Join(stuck, "; ")))
		}
		w.closeErr = errors.Join(killErr, recErr, relErr)
		if w.closeErr != nil {
			w.log.Error("watchdog: closed with events not recorded", zap.Error(w.closeErr))
		}
	})
	return w.closeErr
}

// appendTimeout bounds how long a store's Append (the MemoryStore's
// excepted) may hold up the recording of every other session (see
// record.Config.AppendTimeout).
const appendTimeout = 10 * time.Second

// NextDeadline returns the earliest instant at which a verdict is due for
// one of the watched sessions, and false when no session is watched. Test
// helpers use it to step a fake clock from deadline to deadline.
func (w *Watchdog) NextDeadline() (time.Time, bool) {
	w.now() // the wall clock's offset, current (outside the lock: the Clock is user code)
	w.mu.Lock()
	top := w.heap.Peek()
	var due int64
	if top != nil {
		due = top.Due
	}
	w.mu.Unlock()
	if top == nil {
		return time.Time{}, false
	}
	return w.wall(time.Unix(0, due).UTC()), true
}
