// Package record appends a Watchdog's events to its store on a goroutine of
// their own, so that a slow or failing store never delays a verdict.
//
// Items are queued in order and expanded into events when they are
// appended (a fire queues one item that stands for its decision and cancel
// events, built off the scheduler goroutine). Each item belongs to a lane
// (its session): when an append fails, that lane backs off on the clock and
// keeps its order, while the other lanes go on. Nothing is dropped except
// events the store refuses for good.
package record

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// Outcome classifies an append's error.
type Outcome int

const (
	// Retry: a transient failure; the lane backs off.
	Retry Outcome = iota
	// Dropped: refused for good, as intended (a lost terminal race).
	Dropped
	// Refused: refused for good; reported by Close.
	Refused
)

// Clock is the recorder's time source (retries).
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) *clock.Timer
}

// Config holds the recorder's collaborators. Every func is required but
// Recorded.
type Config[T, E any] struct {
	// Append appends events atomically; the recorder passes one at a time
	// (the slice is reused after it returns). It is used when AppendEach
	// is nil.
	Append func(ctx context.Context, events []E) error
	// AppendEach, when set, appends a drain's batch of events in one call,
	// each event on its own (optional): it returns nil when all are
	// recorded, else one error per event (nil: recorded). An event that
	// fails for a reason Classify calls Retry must leave the later events
	// of its lane unrecorded (they fail too), so that each lane's order
	// holds. The slice is reused after it returns.
	AppendEach func(ctx context.Context, events []E) []error
	// Expand appends item t's events, in order, to dst.
	Expand func(dst []E, t *T) []E
	// Lane is item t's lane (its session).
	Lane func(t *T) string
	// Classify sorts a failed append's error.
	Classify func(err error) Outcome
	// Name names an event in logs and in Close's error.
	Name func(e *E) string
	// Panicked is called once per panic recovered from the store
	// (optional).
	Panicked func()
	// Settled is called for each event that leaves the queue: with nil
	// once recorded (after Recorded), or with the error that refused it
	// for good (optional).
	Settled func(e *E, err error)
	// Recorded is called after each event the store recorded (optional).
	Recorded func(e *E)

	Clock              Clock
	Log                *zap.Logger
	RetryMin, RetryMax time.Duration
	// Coalesce, when set, reports whether item t may be folded into a
	// later such item of its lane while CoalesceAt items or more are
	// queued: the queued one then stands for the latest (see Push).
	Coalesce   func(t *T) bool
	CoalesceAt int

	// AppendTimeout bounds how long one Append may hold up the queue (0:
	// no bound). Past it a fresh goroutine takes the queue over, the
	// event is retried after its lane's backoff (stores skip an event id
	// they hold, so a late success is harmless), and the stuck goroutine
	// exits, touching nothing, when its Append returns.
	AppendTimeout time.Duration
}

// maxAbandoned is how many goroutines stuck in Append may be left behind
// at once; past it the recorder waits (the store is wedged).
const maxAbandoned = 16

// ErrAppendTimeout is the failure recorded for an Append that did not return
// within Config.AppendTimeout.
var ErrAppendTimeout = errors.New("store Append did not return in time")

// slot is a queued item and how many of its events are recorded. Slots
// live on the heap, so that a lane's slots can be chained: with a backlog
// of indexAt items or more, Pending indexes the queue by lane once, and
// reads a lane's items without scanning it again (its cost does not grow
// with the backlog of other lanes). Without a backlog, or until Pending
// asks, no push pays for the index.
type slot[T any] struct {
	v     T
	done  int
	box   *box[T]   // while open for coalescing: the latest item it stands for (see Push)
	taken uint64    // box.n when the drain took the slot
	next  *slot[T]  // the lane's next queued slot
	chain *chain[T] // the lane's chain, while queued
}

// chain is a lane's queued slots, in order.
type chain[T any] struct{ first, last *slot[T] }

// box holds the latest item an open slot stands for, and how many items
// were folded into it.
type box[T any] struct {
	v T
	n uint64
}

// item is the slot's item: the latest it stands for while it is open.
// Called with r.mu held.
func (s *slot[T]) item() *T {
	if s.box != nil {
		return &s.box.v
	}
	return &s.v
}

// Recorder is the queue and its goroutine. Push, Pending and Barrier are
// safe for concurrent use; Run is the goroutine.
type Recorder[T, E any] struct {
	c Config[T, E]
	Worker

	mu      sync.Mutex
	q       queue[*slot[T]]
	slab    []slot[T]            // slots not handed out yet
	free    []*slot[T]           // recorded slots, cleared, for reuse
	chains  map[string]*chain[T] // per lane: its queued slots (maybe none)
	cslab   []chain[T]           // chains not handed out yet
	chained int                  // lanes with queued slots
	lanes   map[string]*lane     // lanes backing off after a failed append
	refused []error
	gaveUp  bool               // Close gave up waiting for the goroutine (an Append that never returns)
	open    map[string]*box[T] // per lane, the box of its slot open for coalescing

	coalesced atomic.Int64 // items folded into a later one
	retake    bool         // an open slot was recorded while folded into: drain again

	// With an AppendTimeout: the call in progress and the hang timer.
	state     atomic.Uint64 // gen<<1 | 1 while a call is in progress; gen counts takeovers
	callSeq   atomic.Uint64 // calls started
	hangArmed atomic.Bool   // the hang timer runs
	hangSeen  atomic.Uint64 // callSeq at the timer's previous look
	hang      *clock.Timer  // guarded by mu
	abandoned atomic.Int32  // goroutines left in a hung Append

	ctx    context.Context // passed to Append; cancelled when Close gives up
	cancel context.CancelFunc

	// owned by the recorder goroutine (a takeover starts with fresh ones:
	// the goroutine it replaces may still read its own)
	timer    *clock.Timer
	batch    []*slot[T]
	at       []int
	progress []progress
	totals   []int // per slot of the batch: its events
	call     *call[E]
}

// call is the argument of a store call and its results: events, with each
// one's lane and slot (its index in the batch), and one error per event.
// While a call is in progress with an AppendTimeout, the hang timer reads
// lanes (published by state).
type call[E any] struct {
	events []E
	lanes  []string
	slots  []int
	errs   []error
}

// reset empties c for the next batch. The events are overwritten, not
// cleared: drain clears them once it has no more batches to take.
func (c *call[E]) reset() {
	c.events, c.lanes, c.slots, c.errs = c.events[:0], c.lanes[:0], c.slots[:0], c.errs[:0]
}

type lane struct {
	attempts int
	lastErr  error
	retryAt  time.Time
}

type progress struct {
	pos, done int
	all       bool
}

// batchLen is how many items a drain takes per round trip on the lock, and
// eachBatchLen per call of AppendEach (a store round trip costs more than
// taking the lock a few more times).
const (
	batchLen     = 64
	eachBatchLen = 512
)

// slabLen is how many slots are allocated at once.
const slabLen = 64

// New returns a recorder; start its goroutine with Run.
func New[T, E any](c Config[T, E]) *Recorder[T, E] {
	ctx, cancel := context.WithCancel(context.Background())
	return &Recorder[T, E]{c: c, Worker: NewWorker(), lanes: make(map[string]*lane), ctx: ctx, cancel: cancel, call: &call[E]{}}
}

// Push queues items, in order; call Poke after it to have them recorded
// (a caller may first finish more urgent work). It never blocks on the
// store: callers may hold their own lock (which is then always taken
// before the recorder's).
//
// While CoalesceAt items or more are queued, an item that Config.Coalesce
// accepts is folded into the lane's slot that is still open for it, if
// any: the slot then stands for the latest such item, which takes the
// place of the earlier ones. A slot closes when another item of its lane
// is pushed, so the lane's order holds, or when it is recorded; one
// recorded while a later item was folded into it stays queued, for that
// item.
func (r *Recorder[T, E]) Push(items ...T) {
	started := false
	r.mu.Lock()
	for i := range items {
		if r.c.Coalesce != nil && (len(r.open) > 0 || r.q.end-r.q.head >= r.c.CoalesceAt) {
			folded, first := r.coalesceLocked(&items[i])
			started = started || first
			if folded {
				continue
			}
		}
		r.pushLocked(items[i], nil)
	}
	r.mu.Unlock()
	if started {
		r.c.Log.Warn("watchdog: the store is behind: repeated CONTINUE records of a session are folded into its latest until it catches up",
			zap.Int("queued", r.c.CoalesceAt))
	}
}

// coalesceLocked queues t while the queue is full: it reports whether t was
// folded into an open slot or queued in a new one, and whether that slot is
// the first open one. Called with r.mu held.
func (r *Recorder[T, E]) coalesceLocked(t *T) (done, first bool) {
	id := r.c.Lane(t)
	if !r.c.Coalesce(t) {
		delete(r.open, id) // the lane's later items go after t
		return false, false
	}
	if b := r.open[id]; b != nil {
		b.v = *t
		b.n++
		r.coalesced.Add(1)
		return true, false
	}
	if r.q.end-r.q.head < r.c.CoalesceAt {
		return false, false
	}
	if r.open == nil {
		r.open = make(map[string]*box[T])
	}
	b := &box[T]{v: *t}
	first = len(r.open) == 0
	r.open[id] = b
	r.pushLocked(*t, b)
	return true, first
}

// pushLocked queues v (with its box, if open for coalescing) in a slot, at
// the end of the queue and of its lane's chain. Slots are reused: a
// recorded one is cleared and kept (at most slabLen of them) for the next
// push; new ones are allocated slabLen at a time. Called with r.mu held.
func (r *Recorder[T, E]) pushLocked(v T, b *box[T]) {
	var s *slot[T]
	if n := len(r.free); n > 0 {
		s, r.free = r.free[n-1], r.free[:n-1]
	} else {
		if len(r.slab) == 0 {
			r.slab = make([]slot[T], slabLen)
		}
		s, r.slab = &r.slab[0], r.slab[1:]
	}
	s.v, s.box = v, b
	r.q.push(s)
	if r.chains != nil {
		r.chainLocked(s)
	}
}

// indexAt is the backlog from which Pending indexes the queue by lane
// rather than scanning it: below it a scan is cheap, and a push pays no
// index. The index lasts until the queue is empty.
const indexAt = 4096

// chainLocked appends s to its lane's chain, in the index. Called with r.mu
// held.
func (r *Recorder[T, E]) chainLocked(s *slot[T]) {
	id := r.c.Lane(&s.v)
	c := r.chains[id]
	if c == nil {
		if len(r.cslab) == 0 {
			r.cslab = make([]chain[T], 1024) // 16 KiB: one allocation per 1,024 new lanes
		}
		c, r.cslab = &r.cslab[0], r.cslab[1:]
		r.chains[id] = c
	}
	if c.last != nil {
		c.last.next = s
	} else {
		c.first = s
		r.chained++
	}
	c.last = s
	s.chain = c
}

// unchainLocked removes s from its lane's chain. A lane's slots leave in
// order, so s is its chain's first but for an unforeseen case, handled by
// a walk. Called with r.mu held.
func (r *Recorder[T, E]) unchainLocked(s *slot[T]) {
	c := s.chain // no map lookup: the slot knows its chain
	if c == nil {
		return
	}
	s.chain = nil
	if c.first == s {
		c.first = s.next
	} else {
		p := c.first
		for p != nil && p.next != s {
			p = p.next
		}
		if p == nil {
			return
		}
		p.next = s.next
		if c.last == s {
			c.last = p
		}
	}
	s.next = nil
	if c.first == nil {
		c.last = nil
		r.chained--
	}
	// An emptied chain stays in the map (deleting every lane's entry as it
	// empties leaves the map's probe sequences long): the map is rebuilt
	// with the lanes that have slots once most of its entries are empty.
	if len(r.chains) > 2*r.chained+1024 {
		m := make(map[string]*chain[T], 2*r.chained)
		for k, c := range r.chains {
			if c.first != nil {
				m[k] = c
			}
		}
		r.chains = m
	}
}

// Oldest calls f with the item queued longest (its first version, for a
// slot that coalescing folded later ones into) and reports whether there
// is one. f runs under the recorder's lock: it must only read the item.
func (r *Recorder[T, E]) Oldest(f func(*T)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q.head == r.q.end {
		return false
	}
	f(&(*r.q.at(r.q.head)).v)
	return true
}

// Coalesced is how many items were folded into a later one (see Push).
func (r *Recorder[T, E]) Coalesced() int64 { return r.coalesced.Load() }

// Len is how many items are queued (not all recorded yet).
func (r *Recorder[T, E]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.q.end - r.q.head
}

// Pending returns the events of lane's items not recorded yet, in order.
func (r *Recorder[T, E]) Pending(lane string) []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []E
	if r.chains == nil {
		if r.q.end-r.q.head < indexAt {
			for i := r.q.head; i < r.q.end; i++ {
				if s := *r.q.at(i); r.c.Lane(&s.v) == lane {
					out = r.unrecorded(out, s)
				}
			}
			return out
		}
		r.chains = make(map[string]*chain[T])
		for i := r.q.head; i < r.q.end; i++ {
			r.chainLocked(*r.q.at(i))
		}
	}
	if c := r.chains[lane]; c != nil {
		for s := c.first; s != nil; s = s.next {
			out = r.unrecorded(out, s)
		}
	}
	return out
}

// unrecorded appends the events of s's item not recorded yet to dst.
// Called with r.mu held.
func (r *Recorder[T, E]) unrecorded(dst []E, s *slot[T]) []E {
	n := len(dst)
	dst = r.c.Expand(dst, s.item())
	return append(dst[:n], dst[n+s.done:]...)
}

func (r *Recorder[T, E]) batchLen() int {
	if r.c.AppendEach != nil {
		return eachBatchLen
	}
	return batchLen
}

// Run is the recorder goroutine; it returns when Close is called.
func (r *Recorder[T, E]) Run() { r.Loop(r.drain, r.current(0)) }

// current reports whether the goroutine of generation gen still owns the
// queue.
func (r *Recorder[T, E]) current(gen uint64) func() bool {
	return func() bool { return r.state.Load()>>1 == gen }
}

// ready reports whether lane's items may be attempted at now. Only the
// recorder goroutine writes lanes; others read them under mu.
func (r *Recorder[T, E]) ready(lane string, now time.Time) bool {
	l := r.lanes[lane]
	return l == nil || !now.Before(l.retryAt)
}

// drain attempts, in order, the items of every lane that is not backing
// off, a batch per round trip on the lock, then arms the retry timer.
func (r *Recorder[T, E]) drain() {
	if r.c.AppendTimeout > 0 && r.hangArmed.CompareAndSwap(false, true) {
		r.armHang()
	}
	now := r.c.Clock.Now()
	r.mu.Lock()
	i := r.q.head
	r.mu.Unlock()
	for {
		// Items below end are written before they are pushed and moved
		// only by this goroutine: they are read after unlocking, through
		// pointers taken under the lock (a push may grow the chunk list).
		r.mu.Lock()
		if r.gaveUp {
			r.mu.Unlock()
			return
		}
		r.batch, r.at = r.batch[:0], r.at[:0]
		for ; i < r.q.end && len(r.batch) < r.batchLen(); i++ {
			if s := *r.q.at(i); len(r.lanes) == 0 || r.ready(r.c.Lane(s.item()), now) {
				if s.box != nil { // the drain reads v, outside the lock
					s.v, s.taken = s.box.v, s.box.n
				}
				r.batch, r.at = append(r.batch, s), append(r.at, i)
			}
		}
		r.mu.Unlock()
		if len(r.batch) == 0 {
			break
		}
		// The batch's events go to the store in one call; then each
		// lane's events count, in order, up to its first failure.
		r.progress = r.progress[:0]
		c := r.call
		c.reset()
		r.totals = r.totals[:0]
		for k, s := range r.batch {
			id := r.c.Lane(&s.v)
			n := len(c.events)
			c.events = r.c.Expand(c.events, &s.v)
			r.totals = append(r.totals, len(c.events)-n)
			if s.done > 0 {
				c.events = append(c.events[:n], c.events[n+s.done:]...)
			}
			for range len(c.events) - n {
				c.lanes, c.slots = append(c.lanes, id), append(c.slots, k)
			}
		}
		r.appendCall(c, false)
		var failed map[string]bool // lanes that failed in this call
		for i := 0; i < len(c.events); {
			k, id := c.slots[i], c.lanes[i]
			s := r.batch[k]
			done := s.done
			for ; i < len(c.events) && c.slots[i] == k; i++ {
				if failed[id] || len(r.lanes) > 0 && !r.ready(id, now) {
					continue // an earlier event of its lane failed: keep the order
				}
				if !r.outcome(id, &c.events[i], c.errs[i], false) {
					if failed == nil {
						failed = make(map[string]bool)
					}
					failed[id] = true
					continue
				}
				done++
			}
			if done > s.done {
				r.progress = append(r.progress, progress{r.at[k], done, done == r.totals[k]})
			}
		}
		c.reset()
		clear(r.batch)
		r.mu.Lock()
		if r.gaveUp { // Close took the queue: this goroutine's positions are stale
			r.mu.Unlock()
			return
		}
		for _, p := range r.progress {
			s := *r.q.at(p.pos)
			s.done = p.done
			if l := r.lanes[r.c.Lane(&s.v)]; l != nil && !now.Before(l.retryAt) {
				delete(r.lanes, r.c.Lane(&s.v)) // it moved, and nothing of it failed since
			}
		}
		for _, p := range r.progress {
			s := *r.q.at(p.pos)
			if p.all && s.box != nil {
				if s.box.n != s.taken { // a later item was folded in meanwhile
					s.done = 0
					r.retake = true
					continue
				}
				if id := r.c.Lane(&s.v); r.open[id] == s.box {
					delete(r.open, id)
				}
			}
			if p.all {
				// Removing a position moves only the items before it, so
				// the later positions of the batch still hold.
				r.q.remove(p.pos)
				r.unchainLocked(s)
				*s = slot[T]{}
				if len(r.free) < slabLen {
					r.free = append(r.free, s)
				}
			}
		}
		r.mu.Unlock()
	}
	clear(r.call.events[:cap(r.call.events)]) // what the batches held, for the collector
	clear(r.call.errs[:cap(r.call.errs)])
	r.mu.Lock()
	r.q.compact()
	if r.chained == 0 { // nothing queued: no index until Pending needs one
		r.chains = nil
	}
	retake := r.retake
	r.retake = false
	r.mu.Unlock()
	if retake {
		r.Poke()
	}
	r.armRetry()
}

// outcome sorts the result of appending e, of lane lid: it reports
// whether e left the queue (recorded, or refused for good). On a transient
// failure e's lane backs off. final is set for Close's last attempts.
func (r *Recorder[T, E]) outcome(lid string, e *E, err error, final bool) bool {
	if err == nil {
		if r.c.Recorded != nil {
			r.c.Recorded(e)
		}
		if r.c.Settled != nil {
			r.c.Settled(e, nil)
		}
		return true
	}
	switch r.c.Classify(err) {
	case Dropped:
		r.c.Log.Info("watchdog: the store already holds what this event decides; event not recorded twice",
			zap.String("event", r.c.Name(e)), zap.Error(err))
		if r.c.Settled != nil {
			r.c.Settled(e, err)
		}
		return true
	case Refused:
		r.c.Log.Error("watchdog: store refused event", zap.String("event", r.c.Name(e)), zap.Error(err))
		r.mu.Lock()
		r.refused = append(r.refused, fmt.Errorf("%s: %w", r.c.Name(e), err))
		r.mu.Unlock()
		if r.c.Settled != nil {
			r.c.Settled(e, err)
		}
		return true
	}
	now := r.c.Clock.Now() // user code: never under the lock
	r.mu.Lock()
	attempts, d := r.backOffLocked(lid, err, now)
	r.mu.Unlock()
	if !final {
		r.c.Log.Warn("watchdog: append failed; will retry", zap.String("event", r.c.Name(e)),
			zap.Int("attempts", attempts), zap.Duration("retry_in", d), zap.Error(err))
	}
	return false
}

// appendCall appends c's events and fills c.errs, one per event. With an
// AppendTimeout (and not final, for Close's last attempts) the call is
// watched by the hang timer: if another goroutine takes the queue over
// while it hangs, this goroutine exits when it returns, touching nothing.
func (r *Recorder[T, E]) appendCall(c *call[E], final bool) {
	c.errs = append(c.errs[:0], make([]error, len(c.events))...)
	if len(c.events) == 0 {
		return
	}
	if r.c.AppendTimeout <= 0 || final {
		r.store(c)
		return
	}
	gen := r.state.Load() >> 1
	r.callSeq.Add(1)
	r.state.Store(gen<<1 | 1) // publishes c.lanes to the hang timer
	r.store(c)
	if !r.state.CompareAndSwap(gen<<1|1, gen<<1) {
		r.abandoned.Add(-1)
		runtime.Goexit()
	}
}

// store calls the store for c's events: AppendEach once, or Append once
// per event, skipping the later events of a lane whose append failed for
// a transient reason, and the later events of an item whose event was
// dropped (they get its error). A panic is turned into an error for the events it
// left without a result (a transient failure: they are retried, and Close
// names them if they never go through).
func (r *Recorder[T, E]) store(c *call[E]) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			if r.c.Panicked != nil {
				r.c.Panicked()
			}
			err := fmt.Errorf("%w: %v", ErrAppendPanicked, p)
			for j := i; j < len(c.errs); j++ {
				c.errs[j] = err
			}
		}
	}()
	if r.c.AppendEach != nil {
		errs := r.c.AppendEach(r.ctx, c.events)
		switch {
		case errs == nil:
		case len(errs) != len(c.events):
			err := fmt.Errorf("the store's AppendEach returned %d results for %d events", len(errs), len(c.events))
			for j := range c.errs {
				c.errs[j] = err
			}
		default:
			copy(c.errs, errs)
		}
		i = len(c.events)
		return
	}
	failed := false
	for ; i < len(c.events); i++ {
		for j := 0; failed && j < i; j++ {
			if c.errs[j] != nil && c.lanes[j] == c.lanes[i] && r.c.Classify(c.errs[j]) == Retry {
				c.errs[i] = c.errs[j]
				break
			}
		}
		if c.errs[i] == nil && i > 0 && len(c.slots) == len(c.events) && c.slots[i-1] == c.slots[i] &&
			c.errs[i-1] != nil && r.c.Classify(c.errs[i-1]) == Dropped {
			// An item dropped is dropped whole: the later events of a
			// fire whose decision was fenced (another owner holds the
			// window) are not recorded without it.
			c.errs[i] = c.errs[i-1]
		}
		if c.errs[i] == nil {
			c.errs[i] = r.c.Append(r.ctx, c.events[i:i+1:i+1])
			failed = failed || c.errs[i] != nil && r.c.Classify(c.errs[i]) == Retry
		}
	}
}

// attempt appends e, of lane lid, on its own (Close's last attempts): it
// reports whether e left the queue.
func (r *Recorder[T, E]) attempt(lid string, e E) bool {
	c := &call[E]{events: []E{e}, lanes: []string{lid}}
	r.appendCall(c, true)
	return r.outcome(lid, &c.events[0], c.errs[0], true)
}

// backOffLocked records a failed append of lane id's head at now: the lane
// waits RetryMin, doubling with each failure, up to RetryMax. It returns
// the lane's failures so far and the wait. Called with r.mu held.
func (r *Recorder[T, E]) backOffLocked(id string, err error, now time.Time) (attempts int, d time.Duration) {
	l := r.lanes[id]
	if l == nil {
		l = &lane{}
		r.lanes[id] = l
	}
	l.attempts++
	l.lastErr = err
	d = r.c.RetryMin << min(l.attempts-1, 30)
	if d <= 0 || d > r.c.RetryMax {
		d = r.c.RetryMax
	}
	l.retryAt = now.Add(d)
	return l.attempts, d
}

// armHang arms the hang timer for half the AppendTimeout: a call in
// progress at two looks in a row has run for half the timeout to the whole
// of it.
func (r *Recorder[T, E]) armHang() {
	r.swapHang(r.c.Clock.AfterFunc(r.c.AppendTimeout/2, r.checkHang)) // user code: never under the lock
}

// stopHang stops the hang timer (Close).
func (r *Recorder[T, E]) stopHang() { r.swapHang(nil) }

// swapHang makes t the hang timer and stops the one it replaces.
func (r *Recorder[T, E]) swapHang(t *clock.Timer) {
	r.mu.Lock()
	old := r.hang
	r.hang = t
	r.mu.Unlock()
	if old != nil {
		old.Stop()
	}
}

// checkHang is the hang timer's callback. If the same call has been in
// progress since the previous look, a fresh goroutine takes the queue over
// and the call's events are retried after their lanes' backoff. The timer runs
// while the recorder has work.
func (r *Recorder[T, E]) checkHang() {
	st, seq := r.state.Load(), r.callSeq.Load()
	if st&1 == 1 && seq == r.hangSeen.Load() && r.abandoned.Load() < maxAbandoned &&
		r.state.CompareAndSwap(st, (st>>1+1)<<1) {
		r.abandoned.Add(1)
		lanes := r.call.lanes  // the stuck goroutine's, published by state
		now := r.c.Clock.Now() // user code: never under the lock
		r.mu.Lock()
		if r.gaveUp {
			r.mu.Unlock()
			return
		}
		for i, id := range lanes {
			if i == 0 || id != lanes[i-1] {
				r.backOffLocked(id, ErrAppendTimeout, now)
			}
		}
		r.mu.Unlock()
		r.c.Log.Error("watchdog: the store's Append did not return in time; recording goes on without it",
			zap.String("session_id", lanes[0]), zap.Int("sessions", len(slices.Compact(slices.Clone(lanes)))),
			zap.Duration("timeout", r.c.AppendTimeout))
		go func() {
			r.call = &call[E]{} // the stuck goroutine still holds its own
			r.takeOver(r.drain, r.current(st>>1+1))
		}()
	}
	r.hangSeen.Store(seq)
	// Keep looking while there is work; stop when there is none (a drain
	// that starts later arms the timer again).
	if r.state.Load()&1 == 0 && r.Len() == 0 {
		r.hangArmed.Store(false)
		if r.state.Load()&1 == 0 && r.Len() == 0 || !r.hangArmed.CompareAndSwap(false, true) {
			return
		}
	}
	r.armHang()
}

// ErrAppendPanicked is wrapped by the error of an Append that panicked.
var ErrAppendPanicked = errors.New("store Append panicked")

// armRetry arms one clock timer for the earliest lane backing off.
func (r *Recorder[T, E]) armRetry() {
	r.mu.Lock()
	var earliest time.Time
	for _, l := range r.lanes {
		if earliest.IsZero() || l.retryAt.Before(earliest) {
			earliest = l.retryAt
		}
	}
	r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if !earliest.IsZero() {
		r.timer = r.c.Clock.AfterFunc(max(earliest.Sub(r.c.Clock.Now()), 0), r.Poke)
	}
}

// Close stops the goroutine, then makes one last attempt at every pending
// event in order, ignoring backoff (a lane whose append fails keeps its
// later events), until ctx ends; an Append blocked past ctx's end is
// cancelled. It returns an error wrapping notRecorded that names every
// event it could not record, joined with the refusals.
func (r *Recorder[T, E]) Close(ctx context.Context, notRecorded error) error {
	stopCancel := context.AfterFunc(ctx, r.cancel) // unblocks a hung Append
	defer stopCancel()
	defer r.cancel()
	// A goroutine stuck in an Append that ignores its context is left
	// behind: Close returns by ctx's end whatever the store does.
	stuck := r.StopWithin(ctx) != nil
	r.stopHang()
	type pendingEvent struct {
		lane string
		e    E
	}
	r.mu.Lock()
	r.gaveUp = stuck
	var pend []pendingEvent
	for i := r.q.head; i < r.q.end; i++ {
		s := *r.q.at(i)
		id := r.c.Lane(s.item())
		evs := r.c.Expand(nil, s.item())
		for _, e := range evs[s.done:] {
			pend = append(pend, pendingEvent{id, e})
		}
	}
	r.q = queue[*slot[T]]{}
	r.chains, r.chained = nil, 0
	r.open = nil
	lanes := r.lanes
	if !stuck { // the last attempts start afresh; a stuck goroutine may still read lanes
		r.lanes = make(map[string]*lane)
	}
	r.mu.Unlock()
	if !stuck && r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}

	// The last attempts run on a goroutine of their own, so that an Append
	// that ignores its context cannot hold Close past ctx's end.
	recorded := make(chan bool, len(pend))
	if !stuck && len(pend) > 0 {
		go func() {
			failed := map[string]bool{}
			for _, p := range pend {
				ok := ctx.Err() == nil && !failed[p.lane] && r.attempt(p.lane, p.e)
				if !ok {
					failed[p.lane] = true
				}
				recorded <- ok
			}
		}()
	}
	var lost []string
	var lastErr error
	if stuck {
		lastErr = errors.New("the store's Append did not return by Close's deadline (it ignores its context); the event it was appending may be recorded")
	}
	for i, p := range pend {
		ok := false
		if !stuck {
			select {
			case ok = <-recorded:
			case <-ctx.Done():
				stuck = true
				lastErr = errors.New("the store's Append did not return by Close's deadline (it ignores its context); the event it was appending may be recorded")
			}
		}
		if ok {
			continue
		}
		lost = append(lost, r.c.Name(&pend[i].e))
		if lastErr != nil {
			continue
		}
		r.mu.Lock()
		if l := r.lanes[p.lane]; l != nil && l.lastErr != nil {
			lastErr = l.lastErr
		} else if l := lanes[p.lane]; l != nil && l.lastErr != nil {
			lastErr = l.lastErr
		}
		r.mu.Unlock()
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	sort.Strings(lost)
	r.mu.Lock()
	errs := append([]error(nil), r.refused...)
	r.mu.Unlock()
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d event(s): %s: last error: %w", notRecorded, len(lost), strings.Join(lost, "; "), lastErr))
	}
	return errors.Join(errs...)
}

// Hung is how many goroutines are left in an Append that did not return
// within the AppendTimeout.
func (r *Recorder[T, E]) Hung() int { return int(r.abandoned.Load()) }
