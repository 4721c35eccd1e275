package watchdog

import (
	"sync/atomic"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// fireRecord is a fire with the default action: its verdict, and what its
// decision and cancel events record. The scheduler queues the two events as
// references to it and the recorder goroutine builds them when it records
// them (fireRecord.event), so that a fire costs the scheduler no event
// building. The scheduler takes records that the recorder goroutine
// allocated ahead (fireStash), so that a fire does not allocate on the
// scheduler goroutine either: an allocation there could make it assist the
// garbage collector, and when fires pile up, that work delayed the next pass
// (see BENCHMARKS.md, fire lateness).
//
// A record is not modified once queued (but for next, while its pass
// chains fires, and stage, by the recorder), and is reused once both of
// its events have left the queue: what the session keeps is its firedVerdict,
// a separate and smaller object, so that a storm of fires leaves behind
// only what it must (each fire's kept bytes are garbage the collector has
// to catch up with, and a collection during a storm delays the timer).
type fireRecord struct {
	v        *firedVerdict
	s        *Session
	facts    decisionFacts // facts.summary is v.evidence's
	cancelID string
	next     *fireRecord // the next fire of its chain (see recorder.pushFireHeld)
	stage    fireStage   // in a chain: which of its events are recorded; written under the recorder's mu
}

// fireStage is how far a chained fire's events are recorded.
type fireStage uint8

const (
	fireUnrecorded       fireStage = iota
	fireDecisionRecorded           // the decision event; the cancel event is queued
	fireRecorded                   // both
)

// firedVerdict is what a session fired with the default action keeps, in
// its heap item (see endCauseLocked): the verdict, which is the context's
// cause, and the storage of its evidence summary (up to 4 channels; more
// are allocated apart). 352 bytes.
type firedVerdict struct {
	ve       VerdictError
	evidence [4]EvidenceEntry
}

// fireLocked is never called: a fired session is not scheduled again. It
// makes a firedVerdict storable in the session's heap item.
func (f *firedVerdict) fireLocked(*Watchdog, time.Time, *dueWork) {}

// fireStash hands the scheduler fireRecords prepared by the recorder
// goroutine: once a Watchdog has fired, the recorder fills a batch whenever
// the stash has none ready, and the scheduler takes the whole batch and
// uses it up under w.mu. No lock: two atomics. A Watchdog that never fires
// holds no batch; one that has fired holds up to two batches of fresh
// records (about 280 KB with their verdicts), enough for the fires of a few
// milliseconds of a storm while the recorder is descheduled, and up to
// maxFreeRecords recorded records for reuse (about 100 KB). The records
// themselves are reused (free); each fire allocates only its firedVerdict,
// on the recorder goroutine.
type fireStash struct {
	ready atomic.Pointer[fireBatch] // a full batch, or nil
	fired atomic.Bool               // the scheduler has taken a record: keep a batch ready
	cur   *fireBatch                // the batch in use; guarded by w.mu
	free  []*fireRecord             // recorded records, zeroed; owned by the recorder goroutine
}

type fireBatch struct {
	recs [fireBatchLen]*fireRecord
	next int
}

const fireBatchLen = 256

// maxFreeRecords bounds the recorded records a stash keeps for reuse.
const maxFreeRecords = 2 * fireBatchLen

// refill makes a batch ready if none is and the Watchdog has fired.
// Called by the recorder goroutine.
func (st *fireStash) refill() {
	if !st.fired.Load() || st.ready.Load() != nil {
		return
	}
	b := new(fireBatch)
	for i := range b.recs {
		var f *fireRecord
		if n := len(st.free); n > 0 {
			f, st.free[n-1] = st.free[n-1], nil
			st.free = st.free[:n-1]
		} else {
			f = new(fireRecord)
		}
		f.v = new(firedVerdict)
		b.recs[i] = f
	}
	st.ready.Store(b) // only this goroutine stores a non-nil batch
}

// recycle takes back f once both of its events have left the recorder's
// queue. Called by the recorder goroutine.
func (st *fireStash) recycle(f *fireRecord) {
	*f = fireRecord{}
	if len(st.free) < maxFreeRecords {
		st.free = append(st.free, f)
	}
}

// take returns a fresh record, its verdict allocated: from the stash, or
// allocated if the stash is empty. Called with w.mu held.
func (st *fireStash) take() *fireRecord {
	if st.cur == nil || st.cur.next == fireBatchLen {
		if !st.fired.Load() {
			st.fired.Store(true)
		}
		st.cur = st.ready.Swap(nil)
		if st.cur == nil {
			return &fireRecord{v: new(firedVerdict)}
		}
	}
	f := st.cur.recs[st.cur.next]
	st.cur.recs[st.cur.next] = nil
	st.cur.next++
	return f
}

// fireDefaultLocked ends s's window on verdict v (decided at now from sn)
// with the default action and queues its decision and cancel events.
// Called with w.mu held, during a scheduler pass or not.
func (w *Watchdog) fireDefaultLocked(s *Session, sn decide.Snapshot, v decide.Verdict, now time.Time) *VerdictError {
	f := w.stash.take()
	f.s = s
	f.facts = s.decisionFacts(sn, v, now, f.v.evidence[:0])
	f.v.ve = s.verdict(v, now, w.newEventID(), f.facts.summary)
	w.endWindowLocked(s, nil)
	kept := f.v
	s.item.Value = kept // the session's verdict from now on (see endCauseLocked)
	f.cancelID = w.newEventID()
	w.enqueueFireLocked(f) // f may be recorded and reused from here on
	return &kept.ve
}

// event builds the fire's decision or cancel event (kind).
func (f *fireRecord) event(kind string) Event {
	if kind == KindDecision {
		return f.s.decisionEvent(f.v.ve.DecisionID, &f.facts, ModeAct)
	}
	return f.s.cancelEvent(f.cancelID, &f.v.ve, f.facts.summary, f.facts.childWait, f.facts.now)
}
