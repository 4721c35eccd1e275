package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// Leaser is an optional interface of an EventStore that a fleet of
// Watchdogs shares (the PostgreSQL store is one). Each Watchdog is an owner,
// named by an id per New (Event.Owner on every event it records), and owns
// the windows it opens or resumes. Ownership is a lease: the Watchdog renews
// it with Heartbeat every third of its time to live (WithLease, default
// DefaultLeaseTTL), one call per Watchdog whatever the number of sessions,
// and the store judges expiry on its own clock. A Watchdog made WithAdoption
// calls Adopt about every sixth of the time to live and takes over the
// windows Adopt hands it (see Policy.ContinueWhenOwnerLost). Close calls
// Release, so a deploy does not wait out the lease.
//
// The store fences writes: an event of a window another owner holds (it
// adopted the window, or resumed it after this owner's lease expired) is
// refused with an error wrapping ErrAlreadyWatched, and the Watchdog stops
// watching that session (its context ends with that error). In AppendEach,
// the later events of that session in the batch are refused the same way
// (a fire's cancel is never recorded without its decision). A resume by
// another owner of a window whose owner's lease is live is refused the same
// way. Each method must be safe for concurrent use; the Watchdog calls them
// off its scheduler, bounded by a context. A Leaser may also have Now(ctx
// context.Context) (time.Time, error), the store's clock, which members on
// the real clock record on, and Held(ctx context.Context, owner string) ([]Checkpoint,
// error), the open windows owner holds, which an owner asks once its lease
// lapsed (see docs/fleet.md). The PostgreSQL store has both.
type Leaser interface {
	// Heartbeat creates or renews owner's lease until ttl from now on the
	// store's clock, and keeps checkpoints: the evidence of windows owner
	// holds whose evidence changed since its previous heartbeat (at most
	// 4,096 per heartbeat), for an adopter to continue from.
	Heartbeat(ctx context.Context, owner string, ttl time.Duration, checkpoints []Checkpoint) error
	// Release ends owner's lease now: its open windows may be adopted at
	// once.
	Release(ctx context.Context, owner string) error
	// Adopt hands adopter up to limit open windows whose owner's lease has
	// expired or was released, making adopter their owner: the store
	// arbitrates, so that exactly one caller gets each window.
	Adopt(ctx context.Context, adopter string, limit int) ([]Orphan, error)
}

// StopSource is an optional interface of a Leaser store (the PostgreSQL
// store has it) that carries stop requests made from anywhere, by anyone
// the store can name, to the Watchdog that owns the session. A Watchdog on
// such a store calls ServeStops once, from New until Close, on a goroutine
// of its own. ServeStops calls stop for each request of a window owner
// holds, from one goroutine at a time, and returns when ctx ends. stop ends
// the window as Session.StopBy(by, why) does (reason StopRequested, the
// same event and cause) and returns nil; it returns an error wrapping
// ErrUnknownSession if this Watchdog does not run that window (not open
// here yet, ended, or another's: ask again later, or read how it ended),
// one wrapping ErrAlreadyDecided if it ended while stop ran (nothing is
// recorded), and one wrapping ErrInvalidArgument for a by or why StopBy
// refuses.
type StopSource interface {
	ServeStops(ctx context.Context, owner string, stop func(sessionID string, window int, by, why string) error) error
}

// stopRequested is the stop of ServeStops (see StopSource).
func (w *Watchdog) stopRequested(id string, window int, by, why string) error {
	if err := checkBy(by, why); err != nil {
		return err
	}
	w.mu.Lock()
	s := w.sessions.Get(id)
	w.mu.Unlock()
	if s == nil || int(s.window) != window || s.state.Load() != stateRunning {
		return fmt.Errorf("%w: %q window %d is not running under owner %s", ErrUnknownSession, id, window, w.owner)
	}
	if ended, err := s.stop(StopRequested, by, why); !ended {
		return fmt.Errorf("%w: %q window %d ended before the stop: %w", ErrAlreadyDecided, id, window, cmp.Or(err, ErrSessionStopped))
	}
	return nil
}

// serveStops runs ServeStops until Close (see StopSource).
func (w *Watchdog) serveStops(src StopSource) {
	defer w.wg.Done()
	err := w.faults.call("StopSource.ServeStops", func() error { return src.ServeStops(w.fleet.ctx, w.owner, w.stopRequested) })
	if err != nil && w.fleet.ctx.Err() == nil {
		w.log.Error("watchdog: remote stop requests are no longer served", zap.String("owner", w.owner), zap.Error(err))
	}
}

// Orphan is an open window that Adopt handed over: its session, its
// window, the owner that lost it, when that owner was last seen (its last
// heartbeat, on the store's clock; zero if it never sent one) and the
// window's last evidence checkpoint (nil if none was kept).
type Orphan struct {
	SessionID string
	Window    int
	Owner     string
	LastSeen  time.Time
	Evidence  []EvidenceEntry
}

// Checkpoint is a window's evidence, per channel, as its owner saw it at a
// heartbeat (see Leaser), with, for a live list of the open windows, the
// window's start and wall-clock deadline, the calls in flight then (how
// many, and the oldest one's name) and the earliest instant a rule stops
// the window, with that rule (zero and empty when not known).
type Checkpoint struct {
	SessionID                 string
	Window                    int
	Evidence                  []EvidenceEntry
	WindowStartedAt, Deadline time.Time
	CallsInFlight             int
	OldestCall                string
	StopAt                    time.Time
	StopRule                  string
}

// maxCheckpoints bounds the checkpoints one heartbeat carries.
const maxCheckpoints = 4096

// checkpoints returns, from each running window's Snapshot, the
// checkpoints of those whose evidence or calls in flight changed since
// their last one (by a key: the channels' counters summed, and, with calls
// in flight, the calls and the earliest stop), with that key for each, to
// keep once the heartbeat succeeds (in s.ckpt[of]); instants are the
// timeline's plus off.
// A window without calls whose evidence did not change costs no Snapshot.
func (w *Watchdog) checkpoints(off time.Duration, of int) (cps []Checkpoint, sns []Snapshot, ss []*Session, keys []uint64) {
	w.mu.Lock()
	all := w.sessions.All()
	w.mu.Unlock()
	// From where the last pass stopped, so that past maxCheckpoints busy
	// windows every one gets its turn.
	from := int(w.ckptFrom.Load() % uint64(max(len(all), 1)))
	for k := range all {
		s := all[(from+k)%len(all)]
		if len(cps) == maxCheckpoints {
			w.ckptFrom.Store(uint64(from + k))
			break
		}
		if s.state.Load() != stateRunning {
			continue
		}
		const callsBit = 1 << 63 // marks a key taken with calls in flight
		var sum uint64           // lock-free: a window without calls whose evidence did not change is skipped
		for i := range s.numChannels() {
			sum += s.chanAt(Channel(i)).count.Load()
		}
		sum &^= callsBit
		if sum == s.ckpt[of].Load() {
			continue
		}
		sn := s.Snapshot()
		key := sum // with calls in flight, a key of the evidence, the calls and the stop
		if sn.CallsInFlight > 0 {
			key = (sum + uint64(sn.CallsInFlight)<<40 ^ uint64(toNanos(sn.StopAt))) | callsBit
		}
		if key == s.ckpt[of].Load() || !sn.Running {
			continue
		}
		d := off - time.Duration(w.offset.Load()) // Snapshot's wall instants to the timeline, plus off
		for _, t := range sn.times() {
			if t != nil && !t.IsZero() {
				*t = t.Add(d).UTC()
			}
		}
		cp := Checkpoint{SessionID: s.id, Window: int(s.window), Evidence: sn.Evidence, WindowStartedAt: sn.WindowStartedAt, Deadline: sn.Deadline,
			CallsInFlight: sn.CallsInFlight, StopAt: sn.StopAt, StopRule: sn.StopRule}
		if len(sn.Calls) > 0 {
			cp.OldestCall = sn.Calls[0].Name
		}
		cps, sns, ss, keys = append(cps, cp), append(sns, sn), append(ss, s), append(keys, key)
	}
	return
}

// seed gives an adopted session the evidence of its window's checkpoint:
// each channel's latest instant and counter, so that the idle rule
// continues from them. Called before the session is shared.
func (w *Watchdog) seed(s *Session, ev []EvidenceEntry) {
	// A seeded instant ahead of the Clock (another member's clock) proves
	// no later work: it is taken as now.
	now := toNanos(w.now())
	var sum uint64
	for i := range s.numChannels() {
		for _, en := range ev {
			if en.Channel != s.channelName(i) {
				continue
			}
			c := s.chanAt(Channel(i))
			if en.LastAt != nil {
				c.last.Store(min(toNanos(w.fromRecord(*en.LastAt)), now))
			}
			c.count.Store(en.Counter)
			sum += en.Counter
		}
	}
	s.ckpt[0].Store(sum)
	s.ckpt[1].Store(sum)
}

// DefaultLeaseTTL is a Watchdog's lease time to live with a Leaser store
// unless WithLease says otherwise: renewed every 2 s, so a database stall or
// a pause of 2 s takes nothing over, while an owner that died is adopted
// about 6 to 7 s after its last heartbeat.
const DefaultLeaseTTL = 6 * time.Second

// StopOwnerLost is the stop reason code of a window that an adopter ended
// because its owner was lost (see Policy.ContinueWhenOwnerLost).
const StopOwnerLost = "owner_lost"

// WithLease sets the lease time to live with a Leaser store: renewed every
// ttl/3; with WithAdoption, other owners' expired leases are looked for
// every ttl/6. Default DefaultLeaseTTL; values below 300 ms mean 300 ms.
// Renewals and sweeps run on the Watchdog's Clock while the store judges
// expiry on its own: a Watchdog on a fake clock that is not advanced stops
// renewing, and its lease expires as a paused process's would.
func WithLease(ttl time.Duration) Option {
	return func(c *config) { c.leaseTTL = ttl }
}

// WithAdoption makes the Watchdog a fleet member that adopts the open
// windows of owners whose lease expired (with a Leaser store; without one
// it does nothing). What it does with each is the window's recorded
// Policy.ContinueWhenOwnerLost. Default: off.
func WithAdoption() Option {
	return func(c *config) { c.adopt = true }
}

// fleet is a Watchdog's lease and adoption state with a Leaser store.
type fleet struct {
	store   Leaser
	ttl     time.Duration
	adopt   bool
	leased  chan struct{} // closed after the first successful heartbeat
	once    sync.Once     // closes leased
	retry   []Orphan      // adopted here, not watched yet; owned by the adoption goroutine
	ctx     context.Context
	cancel  context.CancelFunc // ends the calls in progress (Close)
	lastOK  atomic.Int64       // when the last renewal started (timeline, ns)
	attempt atomic.Int64       // when the last heartbeat to end began (timeline, ns); see leaseFirst
	started atomic.Int64       // when the heartbeat that runs began, in real time since w.epoch, as the store calls' bounds
	busy    atomic.Bool        // a heartbeat runs: one at a time
	beat    chan struct{}      // buffered: signalled when a heartbeat ends
}

func newFleet(store EventStore, c *config) *fleet {
	l, ok := store.(Leaser)
	if !ok {
		return nil
	}
	ttl := max(cmp.Or(max(c.leaseTTL, 0), DefaultLeaseTTL), 300*time.Millisecond) // 0 or less: the default
	f := &fleet{store: l, ttl: ttl, adopt: c.adopt, leased: make(chan struct{}), beat: make(chan struct{}, 1)}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// awaitLease waits for the Watchdog's first heartbeat, bounded by ctx: a
// window is never opened under an owner the store has no lease for.
func (w *Watchdog) awaitLease(ctx context.Context) error {
	if w.fleet == nil {
		return nil
	}
	select {
	case <-w.fleet.leased:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watchdog: the store took no heartbeat of owner %s before the context ended: %w", w.owner, context.Cause(ctx))
	case <-w.done:
		return ErrClosed
	}
}

// every calls fn(step) every step on the Watchdog's clock until Close: the
// lease goroutine (heartbeat, ttl/3) and the adoption one (sweep, ttl/6).
func (w *Watchdog) every(step time.Duration, fn func(time.Duration)) {
	defer w.wg.Done()
	for ok := true; ok; ok = w.sleep(step) {
		fn(step)
	}
}

// sleep waits d on the Watchdog's clock; false once the Watchdog closes.
func (w *Watchdog) sleep(d time.Duration) bool { return w.wait(w.after(d)) }

// after arms a timer of d on the Clock; wait waits for it, or for Close.
func (w *Watchdog) after(d time.Duration) (<-chan struct{}, *clock.Timer) {
	tick := make(chan struct{})
	return tick, w.clock.AfterFunc(d, func() { close(tick) })
}

func (w *Watchdog) wait(tick <-chan struct{}, t *clock.Timer) bool {
	select {
	case <-tick:
		return true
	case <-w.done:
		if t != nil {
			t.Stop()
		}
		return false
	}
}

func (w *Watchdog) heartbeat(within time.Duration) {
	f := w.fleet
	if !f.busy.CompareAndSwap(false, true) {
		return // another one runs (see leaseFirst), which leaseFirst waits for
	}
	defer f.busy.Store(false)
	f.started.Store(int64(time.Since(w.epoch)))
	ctx, cancel := context.WithTimeout(f.ctx, within)
	defer cancel()
	start := w.now()
	defer func() {
		f.attempt.Store(toNanos(start)) // when it began: one that a pause froze hides no pause
		select {
		case f.beat <- struct{}{}: // for leaseFirst
		default:
		}
	}()
	cps, _, ss, sums := w.checkpoints(w.recOffset(), 1) // recorded instants
	if err := w.faults.call("Leaser.Heartbeat", func() error { return f.store.Heartbeat(ctx, w.owner, f.ttl, cps) }); err != nil {
		w.leaseFailures.Add(1)
		w.log.Warn("watchdog: lease heartbeat failed; other fleet members adopt this Watchdog's windows once its lease expires",
			zap.String("owner", w.owner), zap.Duration("ttl", f.ttl), zap.Error(err))
		return
	}
	w.leaseRenewals.Add(1)
	for i, s := range ss {
		s.ckpt[1].Store(sums[i])
	}
	ctx, cancel = context.WithTimeout(f.ctx, within) // a bound of their own: a pause may have spent the first
	defer cancel()
	w.readStoreClock(ctx)
	if gap := time.Duration(toNanos(w.now()) - f.lastOK.Load()); f.lastOK.Load() != 0 && gap > f.ttl {
		w.disownLost(ctx, gap) // the lease lives again: no more windows can be taken
	}
	f.lastOK.Store(toNanos(start))
	f.once.Do(func() { close(f.leased) })
}

// leaseFirst begins each pass, at now: if no heartbeat that ended began less than a lease ago
// (one begins every ttl/3), the process was paused: it runs a heartbeat, which ends the sessions
// lost (disownLost), and waits for it, at most ttl/3, never for one hung longer. It returns the
// pass's now: after the wait, a fresh reading.
func (w *Watchdog) leaseFirst(now time.Time) time.Time {
	f := w.fleet
	if f == nil || toNanos(now)-f.attempt.Load() <= int64(f.ttl) ||
		f.busy.Load() && int64(time.Since(w.epoch))-f.started.Load() > int64(f.ttl/3) {
		return now
	}
	f.attempt.Store(toNanos(now)) // not again before a lease's time, answered or not
	select {
	case <-f.beat: // an earlier heartbeat's
	default:
	}
	w.wg.Add(1) // the scheduler's count is held: Close waits for it
	go func() { defer w.wg.Done(); w.heartbeat(f.ttl / 3) }()
	select {
	case <-f.beat:
	case <-time.After(f.ttl / 3): // on the real clock, as the store calls' bounds
	case <-w.done:
	}
	return w.now()
}

// readStoreClock reads the store's clock (a Leaser's Now) between two of the
// real clock's and keeps the offset from it (storeSkew) unless they prove it
// wrong, then the nearest they allow: records are on the store's clock.
func (w *Watchdog) readStoreClock(ctx context.Context) {
	c, ok := w.fleet.store.(interface {
		Now(context.Context) (time.Time, error)
	})
	var at time.Time
	before := w.wall(w.now())
	if !ok || w.rt == nil || w.faults.call("Leaser.Now", func() (err error) { at, err = c.Now(ctx); return err }) != nil || at.IsZero() {
		return
	}
	w.storeSkew.Store(min(max(w.storeSkew.Load(), int64(before.Sub(at))), int64(w.wall(w.now()).Sub(at))))
}

// disownLost ends the sessions, running before it asks, whose window this
// Watchdog no longer holds after its lease lapsed for gap, if the store says
// (a Leaser's Held) and answers openings (a running window is recorded).
func (w *Watchdog) disownLost(ctx context.Context, gap time.Duration) {
	h, ok := w.fleet.store.(interface {
		Held(context.Context, string) ([]Checkpoint, error)
	})
	if !ok || w.openings == nil {
		return
	}
	w.mu.Lock()
	all := slices.DeleteFunc(w.sessions.All(), func(s *Session) bool { return s.state.Load() != stateRunning })
	w.mu.Unlock()
	var held []Checkpoint
	if err := w.faults.call("Leaser.Held", func() (err error) { held, err = h.Held(ctx, w.owner); return err }); err != nil {
		w.log.Warn("watchdog: the lease lapsed; which windows it still holds is unknown", zap.Duration("lapsed", gap), zap.Error(err))
		return
	}
	mine := make(map[string]int, len(held))
	for _, c := range held {
		mine[c.SessionID] = c.Window
	}
	cause := fmt.Errorf("%w (%s): owner %s renewed no lease for %v, more than its %v (paused, or cut off from the store)", ErrAlreadyWatched, StopOwnerLost, w.owner, gap, w.fleet.ttl)
	for _, s := range all {
		if n, ok := mine[s.id]; !ok || n != int(s.window) {
			w.disown(s.id, int(s.window), cause)
		}
	}
}

// adoptBatch is how many windows one Adopt call hands over at most; a
// sweep calls Adopt again while it gets full batches.
const adoptBatch = 64

// sweep adopts the windows whose owner's lease expired, and retries those
// whose adoption failed here before (the store made them this Watchdog's).
func (w *Watchdog) sweep(within time.Duration) {
	f := w.fleet
	select {
	case <-f.leased:
	default:
		return // not a live owner yet: adopted windows would be adoptable at once
	}
	retry := f.retry
	f.retry = nil
	for _, o := range retry {
		w.adoptOrphan(o)
	}
	for {
		ctx, cancel := context.WithTimeout(f.ctx, max(within, time.Second))
		var orphans []Orphan
		err := w.faults.call("Leaser.Adopt", func() (err error) { orphans, err = f.store.Adopt(ctx, w.owner, adoptBatch); return err })
		cancel()
		if err != nil {
			w.log.Warn("watchdog: adoption sweep failed", zap.String("owner", w.owner), zap.Error(err))
			return
		}
		for _, o := range orphans {
			w.adoptOrphan(o)
		}
		if len(orphans) < adoptBatch || f.ctx.Err() != nil {
			return
		}
	}
}

// adoptOrphan watches o's window, which the store made this Watchdog's:
// it records a resume event that says so (adopted_from, owner_last_seen,
// reason owner_lost) under the window's recorded policy, then ends the
// window at once (stop reason owner_lost) unless the policy says to
// continue watching it.
//
// The store may hand back a window this Watchdog still knows: one it
// watched while its lease lapsed (a long pause), which an adopter took over
// and died before recording anything. While the session is still here, or
// while this Watchdog has events of the window the store has not judged
// yet (it may refuse them: fenced while the other owner held the window),
// the window is looked at again at each sweep until the store records its
// end or it can be adopted: never left owned here and watched by nobody.
func (w *Watchdog) adoptOrphan(o Orphan) {
	ctx, cancel := context.WithTimeout(w.fleet.ctx, w.fleet.ttl)
	defer cancel()
	s, err := w.resume(ctx, o.SessionID, Policy{}, &o) // ErrAlreadyWatched while the session is still here
	switch {
	case err == nil:
	case errors.Is(err, errNotOpen), errors.Is(err, ErrClosed):
		return
	default:
		if !errors.Is(err, errPending) && !errors.Is(err, ErrAlreadyWatched) {
			w.log.Error("watchdog: adopting a window failed; retried at the next sweep",
				zap.String("session_id", o.SessionID), zap.Int("window", o.Window), zap.String("from", o.Owner), zap.Error(err))
		}
		w.fleet.retry = append(w.fleet.retry, o)
		return
	}
	w.adopted.Add(1)
	w.log.Info("watchdog: adopted a window whose owner was lost", zap.String("session_id", o.SessionID),
		zap.Int("window", o.Window), zap.String("from", o.Owner), zap.Time("owner_last_seen", o.LastSeen),
		zap.Bool("continue", s.cfg.policy.ContinueWhenOwnerLost))
	if !s.cfg.policy.ContinueWhenOwnerLost {
		_, _ = s.stop(StopOwnerLost)
		return
	}
	if err := s.watchPolicyWorkspace(); err != nil {
		w.log.Warn("watchdog: the adopted window's workspace cannot be watched here; its evidence rules go on without it",
			zap.String("session_id", o.SessionID), zap.String("workspace_root", s.cfg.policy.WorkspaceRoot), zap.Error(err))
	}
}

// errNotOpen: an orphan whose window ended meanwhile (nothing to adopt).
var errNotOpen = errors.New("the window is not open")

// errPending: an orphan of which this Watchdog has events the store has not
// judged yet.
var errPending = errors.New("the window has events not recorded yet")

// disown stops watching session id's window after the store fenced one of
// its events (another owner holds the window): the session leaves the
// Watchdog without a terminal event, and its context ends with cause.
func (w *Watchdog) disown(id string, window int, cause error) {
	w.mu.Lock()
	s := w.sessions.Get(id)
	if s == nil || int(s.window) != window || s.state.Load() != stateRunning {
		w.mu.Unlock()
		return
	}
	lost := fmt.Errorf("watchdog: %q window %d: %w", id, window, cause)
	s.state.Store(stateClosed)
	s.rw().lost = lost // Stop and the other calls on the window return it
	w.sessions.Del(s)
	w.heap.Remove(&s.item)
	s.dropLocked()
	w.mu.Unlock()
	w.disowned.Add(1)
	w.log.Warn("watchdog: this owner's lease lapsed and another owner took the window over; no longer watching it",
		zap.String("session_id", id), zap.Int("window", window), zap.Error(cause))
	s.cancel(lost)
}

// releaseLease ends the Watchdog's lease (Close), so that its windows can be
// adopted at once.
func (w *Watchdog) releaseLease(ctx context.Context) error {
	if w.fleet == nil {
		return nil
	}
	if err := w.faults.call("Leaser.Release", func() error { return w.fleet.store.Release(ctx, w.owner) }); err != nil {
		return fmt.Errorf("watchdog: close: release the lease of owner %s (its windows are adopted once it expires): %w", w.owner, err)
	}
	return nil
}
