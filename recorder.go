package watchdog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// recorder appends events to the store on its own goroutine, so that a slow
// or failing store never delays a verdict. Events are appended in the order
// they were enqueued; when a session's append fails, that session's events
// back off (on the Watchdog's clock) and keep their order, while other
// sessions' events go on. Nothing is dropped except events the store refuses
// for good (a lost terminal race, which is the point of the refusal, or an
// invalid event, which is reported by Close).
type recorder struct {
	store    EventStore
	clock    Clock
	log      *zap.Logger
	retryMin time.Duration
	retryMax time.Duration

	mu        sync.Mutex
	queue     eventQueue       // not yet recorded, in enqueue order
	heldEnd   int              // queue.end at hold
	chainPos  int              // the position of the pass's fire chain (see pushFireHeld); -1: none
	chainTail *fireRecord      // its last record
	blocked   map[string]*lane // sessions backing off after a failed append
	refused   []error          // permanent refusals other than a lost race

	worker
	ctx    context.Context // passed to Append; cancelled when Close gives up
	cancel context.CancelFunc

	timer *clock.Timer // retry wake-up; owned by the recorder goroutine

	// drain's scratch; owned by the recorder goroutine
	batch   []*queued
	at      []int
	staged  []stagedFire // fires of a partly recorded chain, and how far
	removed []queued     // slots of fires removed by a batch, to recycle after unlocking
	moved   []string     // sessions that recorded an event this round, while lanes exist
	one     [1]Event     // Append's argument; owned by the goroutine that attempts

	onEvent    func(Event)       // Observer.OnEvent, called after each successful append
	afterDrain func()            // called after each round of a drain, on the recorder goroutine (the fire stash's refill)
	recycle    func(*fireRecord) // takes back a fire record once its events left the queue; recorder goroutine
	// overdue reports, once per late timer, that the scheduler goroutine
	// has not run a pass that is due: drain then yields its P between two
	// batches. A recorder working through a storm's backlog (a few µs per
	// event with the memory store) keeps its P busy, and the Go runtime
	// runs the due timers of a P only when it schedules, or after a 10 ms
	// preemption: the next pass waited for it (see BENCHMARKS.md, fire
	// lateness). Once per late timer, not every batch: on a saturated
	// machine a yield costs the recorder its turn, and with yields after
	// every batch a storm's events (recorded in about a second otherwise)
	// were not recorded after five minutes. Nil: never yield.
	overdue func() bool
}

// lane is the backoff state of one session whose append failed.
type lane struct {
	attempts int
	lastErr  error
	retryAt  time.Time
}

func newRecorder(c config) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	return &recorder{
		store:    c.store,
		clock:    c.clock,
		log:      c.log,
		retryMin: c.retryMin,
		retryMax: c.retryMax,
		blocked:  make(map[string]*lane),
		worker:   newWorker(),
		ctx:      ctx,
		cancel:   cancel,
		onEvent:  c.obs.OnEvent,
	}
}

// enqueue adds e to the queue. It never blocks and makes no call into the
// store; it may be called with the Watchdog's lock held.
func (r *recorder) enqueue(e Event) {
	r.mu.Lock()
	r.queue.push(queued{Event: e})
	r.mu.Unlock()
	r.poke()
}

// enqueueFire adds the events of fire f, of kinds decision and cancel, to
// the queue as a chain of one (see pushFireHeld); outside a scheduler pass.
func (r *recorder) enqueueFire(f *fireRecord) {
	r.mu.Lock()
	r.queue.push(queued{Event: Event{Kind: kindFireChain}, fire: f})
	r.mu.Unlock()
	r.poke()
}

// queued is a slot of the recorder's queue: an event, or (Kind
// kindFireChain, fire not nil, nothing else set) the decision and cancel
// events of every fire in the chain that starts at fire, built from their
// records when they are recorded (see pushFireHeld).
type queued struct {
	Event
	fire *fireRecord
}

// kindFireChain is the Kind of a fire chain's slot; never an event's.
const kindFireChain = "\x00fire-chain"

// appendEvents appends the events q stands for that are not recorded yet:
// all of them, or only session id's if id is not empty. Called with mu
// held, or once the recorder goroutine has stopped.
func (q *queued) appendEvents(out []Event, id string) []Event {
	if q.Kind != kindFireChain {
		if id == "" || q.AggregateID == id {
			out = append(out, q.Event)
		}
		return out
	}
	for f := q.fire; f != nil; f = f.next {
		if id != "" && f.s.id != id {
			continue
		}
		if f.stage == fireUnrecorded {
			out = append(out, f.event(KindDecision))
		}
		if f.stage != fireRecorded {
			out = append(out, f.event(KindCancel))
		}
	}
	return out
}

// hold takes the queue's lock for a scheduler pass; until release, pushHeld
// adds events without locking. Lock order: the Watchdog's mu, then r.mu.
func (r *recorder) hold() {
	r.mu.Lock()
	r.heldEnd = r.queue.end
	r.chainPos, r.chainTail = -1, nil
}

// pushHeld adds q to the queue; only between hold and release.
func (r *recorder) pushHeld(q queued) { r.queue.push(q) }

// pushFireHeld adds the events of fire f, of kinds decision and cancel, to
// the queue; only between hold and release. The fires a pass pushes one
// after the other share one slot, a chain of their records (fireRecord.next)
// that the recorder expands in order: a storm of fires, which a descheduled
// recorder lets pile up, then costs the queue nothing per fire instead of
// two 560-byte slots, garbage that kept the collector running during the
// storm (see BENCHMARKS.md, fire lateness).
func (r *recorder) pushFireHeld(f *fireRecord) {
	if r.chainTail != nil && r.chainPos == r.queue.end-1 {
		r.chainTail.next = f
		r.chainTail = f
		return
	}
	q := r.queue.slot()
	q.Kind, q.fire = kindFireChain, f
	r.chainPos, r.chainTail = r.queue.end-1, f
}

// release ends hold. It reports whether events were pushed since hold: the
// caller then pokes the recorder goroutine (after its own urgent work).
func (r *recorder) release() bool {
	pushed := r.queue.end != r.heldEnd
	r.chainPos, r.chainTail = -1, nil
	r.mu.Unlock()
	return pushed
}

// pending returns a copy of the events of session id not recorded yet.
func (r *recorder) pending(id string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for i := r.queue.head; i < r.queue.end; i++ {
		out = r.queue.at(i).appendEvents(out, id)
	}
	return out
}

// run is the recorder goroutine.
func (r *recorder) run() { r.loop(r.drain) }

// drain attempts, in order, every event whose session is not backing off,
// then arms the retry timer for the earliest backed-off session. It takes
// the queue's lock once per batch of events, not once per event: the
// scheduler pushes events under that lock, and a recorder that took it
// three times per event made the scheduler queue behind it at high verdict
// rates.
func (r *recorder) drain() {
	// A session whose backoff has run out is attempted again but keeps
	// its lane, and so its attempt count, until an event of it is
	// recorded: the next failure backs off twice as long.
	now := r.clock.Now()
	r.mu.Lock()
	i := r.queue.head
	r.mu.Unlock()
	for {
		// Under the lock, note where the next batch of unblocked events
		// is. Events at positions below end are written only before they
		// are pushed and moved only by this goroutine, so they are read
		// after unlocking.
		r.mu.Lock()
		r.queue.recycle() // the chunks the previous batch left behind, cleared since
		r.batch, r.at = r.batch[:0], r.at[:0]
		head := r.queue.head
		for ; i < r.queue.end && len(r.batch) < drainBatch; i++ {
			if e := r.queue.at(i); len(r.blocked) == 0 || r.ready(e.AggregateID, now) {
				r.batch, r.at = append(r.batch, e), append(r.at, i)
			}
		}
		if len(r.batch) == 0 {
			r.queue.compact()
			r.mu.Unlock()
			break
		}
		r.mu.Unlock()
		n := 0 // r.at[:n] are the recorded positions, ascending
		for k, e := range r.batch {
			if e.Kind == kindFireChain {
				if r.recordChain(e, now) {
					r.at[n] = r.at[k]
					n++
				}
				continue
			}
			if len(r.blocked) > 0 && !r.ready(e.AggregateID, now) {
				continue // an earlier event of its session failed: keep the order
			}
			if r.attempt(e.Event, false) {
				r.at[n] = r.at[k]
				n++
				if len(r.blocked) > 0 {
					r.moved = append(r.moved, e.AggregateID)
				}
			}
		}
		if n == len(r.batch) && r.at[0] == head && r.at[n-1] == head+n-1 {
			// The common case: the whole batch was the queue's head and
			// is recorded. Move the head past it under the lock, then
			// clear its slots after unlocking: below the head, nothing
			// else reads or writes them until the next recycle, under the
			// lock. (Clearing 64 slots under the lock, which Starts and
			// scheduler passes take too, made them wait for it.)
			r.mu.Lock()
			r.clearMovedLocked(now)
			r.queue.advance(n)
			r.mu.Unlock()
			for _, e := range r.batch {
				r.recycleSlot(e)
				*e = queued{}
			}
			clear(r.batch)
			r.betweenBatches()
			continue
		}
		clear(r.batch)
		r.mu.Lock()
		for _, st := range r.staged {
			st.f.stage = st.stage
		}
		r.clearMovedLocked(now)
		for _, pos := range r.at[:n] {
			if q := r.queue.at(pos); q.fire != nil {
				r.removed = append(r.removed, *q)
			}
			// Removing a position moves only the events before it, so
			// the later positions of the batch still hold.
			r.removeLocked(pos)
		}
		r.mu.Unlock()
		for i := range r.removed {
			r.recycleSlot(&r.removed[i])
		}
		clear(r.removed)
		r.removed = r.removed[:0]
		clear(r.staged)
		r.staged = r.staged[:0]
		r.betweenBatches()
	}
	r.armRetry()
	if r.afterDrain != nil {
		r.afterDrain()
	}
}

// betweenBatches runs on the recorder goroutine after each batch of a
// drain: the fire stash is refilled (a long backlog must not leave it
// empty), and the goroutine yields its P if the scheduler's timer is
// overdue (see overdue).
func (r *recorder) betweenBatches() {
	if r.afterDrain != nil {
		r.afterDrain()
	}
	if r.overdue != nil && r.overdue() {
		runtime.Gosched()
	}
}

// ready reports whether session id's events may be attempted at now: it
// has no lane, or its backoff has run out. Called with mu held, or by the
// recorder goroutine, the only writer of blocked.
func (r *recorder) ready(id string, now time.Time) bool {
	l := r.blocked[id]
	return l == nil || !now.Before(l.retryAt)
}

// recordChain attempts the events of fire chain q in order, skipping the
// sessions that back off, including those that failed earlier in this
// round. It reports whether every event of the chain is now recorded; if not, the progress of the
// fires that moved goes to r.staged, for the caller to apply under the lock
// (pending reads it). Only the recorder goroutine writes blocked and the
// fires' stages, so it reads them here without the lock.
func (r *recorder) recordChain(q *queued, now time.Time) bool {
	all, mark := true, len(r.staged)
	for f := q.fire; f != nil; f = f.next {
		stage := f.stage
		if stage == fireRecorded {
			continue // in an earlier round
		}
		id := f.s.id
		if len(r.blocked) > 0 && !r.ready(id, now) {
			all = false
			continue
		}
		if stage == fireUnrecorded {
			if !r.attempt(f.event(KindDecision), false) {
				all = false
				continue
			}
			stage = fireDecisionRecorded
		}
		if r.attempt(f.event(KindCancel), false) {
			stage = fireRecorded
		} else {
			all = false
		}
		r.staged = append(r.staged, stagedFire{f, stage})
		if len(r.blocked) > 0 {
			r.moved = append(r.moved, id)
		}
	}
	if all {
		clear(r.staged[mark:]) // the slot leaves the queue whole
		r.staged = r.staged[:mark]
	}
	return all
}

// stagedFire is the progress of a fire of a partly recorded chain.
type stagedFire struct {
	f     *fireRecord
	stage fireStage
}

// clearMovedLocked clears the lanes (see clearLaneLocked) of the sessions
// that recorded an event this round: only those (a chain that completes may
// hold fires recorded in an earlier round). Called with mu held.
func (r *recorder) clearMovedLocked(now time.Time) {
	for _, id := range r.moved {
		r.clearLaneLocked(id, now)
	}
	clear(r.moved)
	r.moved = r.moved[:0]
}

// recycleSlot hands the fire records of slot q, which has left the queue,
// back for reuse.
func (r *recorder) recycleSlot(q *queued) {
	if r.recycle == nil {
		return
	}
	for f := q.fire; f != nil; {
		next := f.next
		r.recycle(f)
		f = next
	}
}

// clearLaneLocked ends session id's backoff after one of its events was
// recorded, unless a later event of it failed in the same round (its lane
// then waits again, past now). Called with mu held.
func (r *recorder) clearLaneLocked(id string, now time.Time) {
	if l := r.blocked[id]; l != nil && !now.Before(l.retryAt) {
		delete(r.blocked, id)
	}
}

// drainBatch is how many events drain attempts per round trip on the
// queue's lock.
const drainBatch = 64

// removeLocked removes the event at position i: the blocked events before
// it (if any) move up one slot, so removing from the head costs nothing.
func (r *recorder) removeLocked(i int) {
	q := &r.queue
	for j := i; j > q.head; j-- {
		*q.at(j) = *q.at(j - 1)
	}
	q.popFront()
}

// eventQueue is the recorder's FIFO, addressed by stable positions: the
// events at positions [head, end) are queued. It is stored in fixed-size
// chunks, so that growing it never copies the events already queued: an
// Event is over 500 bytes, and a contiguous slice, regrown under the lock
// while a slow store let events pile up, copied hundreds of megabytes and
// held the scheduler up for a second at 100,000 fires. Positions change only
// in compact, which the recorder goroutine calls between passes.
type eventQueue struct {
	chunks [][]queued // chunks[k][j] is position off + k*queueChunk + j
	off    int
	head   int
	end    int
	spares [][]queued // drained chunks (all zero) kept for reuse, at most maxSpares
}

// maxSpares bounds the drained chunks a queue keeps for reuse while it has
// a backlog (about 2.3 MB, only as many as the backlog needed; idleSpares
// once it is empty): a recorder that falls
// behind during a storm of fires (descheduled for tens of milliseconds,
// thousands of events) then finds its chunks again instead of allocating
// them anew, garbage that made the collector run during the storm and
// delay the scheduler's timer (see BENCHMARKS.md, fire lateness).
const maxSpares = 64

const queueChunk = 64

func (q *eventQueue) at(i int) *queued {
	i -= q.off
	return &q.chunks[i/queueChunk][i%queueChunk]
}

func (q *eventQueue) push(e queued) { *q.slot() = e }

// slot appends a zero slot to the queue and returns it, to be filled in
// place: an Event is over 500 bytes, and most of a fire's queued events are
// a few fields (see queued).
func (q *eventQueue) slot() *queued {
	if q.end-q.off == len(q.chunks)*queueChunk {
		var c []queued
		if n := len(q.spares); n > 0 {
			c, q.spares[n-1] = q.spares[n-1], nil
			q.spares = q.spares[:n-1]
		} else {
			c = make([]queued, queueChunk)
		}
		q.chunks = append(q.chunks, c)
	}
	p := q.at(q.end)
	q.end++
	return p
}

// popFront removes the event at head, releasing chunks left behind.
func (q *eventQueue) popFront() {
	*q.at(q.head) = queued{}
	q.head++
	q.recycle()
}

// advance moves head past n events. Their slots are left to the caller,
// which clears them after unlocking (see drain), and the chunks left
// behind to the next recycle.
func (q *eventQueue) advance(n int) { q.head += n }

// recycle releases the chunks wholly below head, whose slots are all zero:
// at most maxSpares are kept for reuse.
func (q *eventQueue) recycle() {
	for q.head-q.off >= queueChunk {
		if len(q.spares) < maxSpares {
			q.spares = append(q.spares, q.chunks[0])
		}
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.off += queueChunk
	}
}

// compact restarts positions at zero when the queue is empty, keeping one
// chunk.
func (q *eventQueue) compact() {
	if q.head != q.end {
		return
	}
	for len(q.chunks) > 1 { // empty chunks beyond the first
		c := q.chunks[len(q.chunks)-1]
		q.chunks[len(q.chunks)-1] = nil
		q.chunks = q.chunks[:len(q.chunks)-1]
		if len(q.spares) < maxSpares {
			q.spares = append(q.spares, c)
		}
	}
	q.off, q.head, q.end = 0, 0, 0
	// Caught up: keep a few spares, not a whole burst's.
	clear(q.spares[min(len(q.spares), idleSpares):])
	q.spares = q.spares[:min(len(q.spares), idleSpares)]
}

// idleSpares is how many spare chunks an empty queue keeps.
const idleSpares = 2

// attempt appends e. It reports whether e left the queue (recorded, or
// refused for good). On a transient failure e's session backs off.
func (r *recorder) attempt(e Event, final bool) bool {
	// A reused one-element slice: the variadic argument would escape to the
	// heap, one Event copy per append.
	r.one[0] = e
	err := r.store.Append(r.ctx, r.one[:]...)
	r.one[0] = Event{}
	switch {
	case err == nil:
		// drain clears e's lane as it removes e; close ignores lanes.
		if r.onEvent != nil {
			r.onEvent(e)
		}
		return true
	case errors.Is(err, ErrAlreadyDecided):
		r.log.Info("watchdog: window already decided elsewhere; event not recorded twice",
			zap.String("session_id", e.AggregateID), zap.Int("window", e.Window),
			zap.String("event_kind", e.Kind), zap.Error(err))
		return true
	case errors.Is(err, ErrInvalidEvent):
		r.log.Error("watchdog: store refused event", zap.String("session_id", e.AggregateID),
			zap.String("event_kind", e.Kind), zap.Error(err))
		r.mu.Lock()
		r.refused = append(r.refused, fmt.Errorf("%s session %q window %d: %w", e.Kind, e.AggregateID, e.Window, err))
		r.mu.Unlock()
		return true
	}
	r.mu.Lock()
	l := r.blocked[e.AggregateID]
	if l == nil {
		l = &lane{}
		r.blocked[e.AggregateID] = l
	}
	l.attempts++
	l.lastErr = err
	d := r.retryMin << min(l.attempts-1, 30)
	if d <= 0 || d > r.retryMax {
		d = r.retryMax
	}
	l.retryAt = r.clock.Now().Add(d)
	attempts := l.attempts
	r.mu.Unlock()
	if !final {
		r.log.Warn("watchdog: append failed; will retry", zap.String("session_id", e.AggregateID),
			zap.String("event_kind", e.Kind), zap.Int("attempts", attempts),
			zap.Duration("retry_in", d), zap.Error(err))
	}
	return false
}

// armRetry arms one clock timer for the earliest backed-off session.
func (r *recorder) armRetry() {
	r.mu.Lock()
	var earliest time.Time
	for _, l := range r.blocked {
		if earliest.IsZero() || l.retryAt.Before(earliest) {
			earliest = l.retryAt
		}
	}
	r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if earliest.IsZero() {
		return
	}
	r.timer = r.clock.AfterFunc(max(earliest.Sub(r.clock.Now()), 0), r.poke)
}

// close stops the goroutine, then makes one last attempt at every pending
// event in order, ignoring backoff (a session whose append fails keeps its
// later events), until ctx ends. It returns an error naming every event it
// could not record.
func (r *recorder) close(ctx context.Context) error {
	stopCancel := context.AfterFunc(ctx, r.cancel) // unblocks a hung Append
	defer stopCancel()
	defer r.cancel()
	close(r.stop)
	<-r.done
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}

	r.mu.Lock()
	var queue []Event
	for i := r.queue.head; i < r.queue.end; i++ {
		queue = r.queue.at(i).appendEvents(queue, "")
	}
	r.queue = eventQueue{}
	clear(r.blocked)
	r.mu.Unlock()
	var kept []Event
	failed := map[string]bool{}
	for _, e := range queue {
		if ctx.Err() != nil || failed[e.AggregateID] || !r.attempt(e, true) {
			failed[e.AggregateID] = true
			kept = append(kept, e)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []string
	var lastErr error
	for _, e := range kept {
		lost = append(lost, fmt.Sprintf("%s session %q window %d (event %s)", e.Kind, e.AggregateID, e.Window, e.ID))
		if l := r.blocked[e.AggregateID]; l != nil && l.lastErr != nil {
			lastErr = l.lastErr
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	sort.Strings(lost)
	errs := append([]error(nil), r.refused...)
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d event(s): %s: last error: %w", ErrNotRecorded, len(lost), strings.Join(lost, "; "), lastErr))
	}
	return errors.Join(errs...)
}
