package watchdog

import (
	"math"
	"time"

	"go.uber.org/zap"
)

// schedule is the Watchdog's one scheduler goroutine. It sleeps until the
// clock timer for the earliest deadline wakes it, or Check asks it to settle,
// then runs a pass over everything due.
func (w *Watchdog) schedule() {
	var rtC <-chan time.Time // the real clock's timer, read here directly
	if w.rt != nil {
		rtC = w.rt.C
	}
	var bsC <-chan struct{} // its backstop's (see backstop)
	if w.bs != nil {
		bsC = w.bs.C
	}
	for {
		select {
		case <-w.done:
			return
		case <-rtC:
			w.pass()
		case <-bsC:
			w.pass()
		case <-w.wakeCh:
			w.pass()
		case req := <-w.checkCh:
			w.pass()
			close(req)
		}
	}
}

// wake is the clock timer's callback. A late or duplicate call only makes
// the scheduler look at the heap once more.
func (w *Watchdog) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// timed is anything the scheduler's heap holds: a session, a deadline
// layer, a wait, a sleeper.
type timed interface {
	// fireLocked handles the item's due instant, with w.mu held; what
	// must happen after unlocking goes to ef.
	fireLocked(w *Watchdog, now time.Time, ef *effects)
}

// pass decides everything due at the clock's now, applies the effects and
// re-arms the timer for the next deadline. It runs on the scheduler
// goroutine only and reuses w.ef, so a pass allocates nothing of its own.
func (w *Watchdog) pass() {
	now := w.clock.Now()
	nowNs := toNanos(now)
	w.coarse.refresh(nowNs)
	ef := &w.ef
	// timerMu first (the lock order), so that the timer is re-armed from
	// the heap as this pass leaves it.
	w.timerMu.Lock()
	w.mu.Lock()
	// Pop every due item first: whatever a handler pushes back during this
	// pass waits for the next one, so a pass always ends.
	due := w.popped[:0]
	for it := w.heap.PopDue(nowNs); it != nil; it = w.heap.PopDue(nowNs) {
		ef.lateness = max(ef.lateness, time.Duration(nowNs-it.Due))
		due = append(due, it.Value)
	}
	for i, t := range due {
		t.fireLocked(w, now, ef)
		due[i] = nil
	}
	w.popped = due[:0]
	w.flushLocked(ef)
	next, ok := w.topDueLocked()
	arm := ok && !w.closed
	w.mu.Unlock()
	w.armLocked(next, arm)
	w.timerMu.Unlock()
	if len(due) > 0 && w.obs.OnSchedulerTick != nil {
		w.obs.OnSchedulerTick(ef.lateness)
	}
	w.apply(ef)
}

// armIfEarlier arms the clock timer for due unless it is already armed for
// an instant at or before due.
func (w *Watchdog) armIfEarlier(due int64) {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	if w.armed && w.armedAt <= due {
		return
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	w.armLocked(due, !closed)
}

// rearm arms the clock timer for the earliest deadline in the heap. Holding
// timerMu while reading the heap orders it with armIfEarlier: a deadline
// pushed after the read arms its own timer if it is earlier.
func (w *Watchdog) rearm() {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	w.mu.Lock()
	due, ok := w.topDueLocked()
	closed := w.closed
	w.mu.Unlock()
	w.armLocked(due, ok && !closed)
}

// topDueLocked returns the heap's earliest due instant, and false if the
// heap is empty. Called with w.mu held.
func (w *Watchdog) topDueLocked() (int64, bool) {
	top := w.heap.Peek()
	if top == nil {
		return 0, false
	}
	return top.Due, true
}

// armLocked is the one path that sets the clock timer: for due (arm), or
// off. The real clock's timer is one time.Timer reset in place and read by
// the scheduler goroutine (with, on Linux, its backstop); any other Clock
// gets an AfterFunc per arming. Called with timerMu held.
func (w *Watchdog) armLocked(due int64, arm bool) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.armed, w.armedAt = arm, due
	if !arm {
		if w.rt != nil {
			w.rt.Stop()
		}
		if w.bs != nil {
			w.bs.stop()
		}
		return
	}
	now := toNanos(w.clock.Now())
	d := time.Duration(0)
	if due > now {
		if now < 0 && due > math.MaxInt64+now {
			d = math.MaxInt64
		} else {
			d = time.Duration(due - now)
		}
	}
	if w.rt != nil {
		w.rt.Reset(d)
		if w.bs != nil {
			w.bs.arm(d)
		}
		return
	}
	w.timer = w.clock.AfterFunc(d, w.wake)
}

// logFires logs the windows a pass ended, if Info is enabled.
func (w *Watchdog) logFires(ef *effects) {
	if len(ef.cancels) == 0 || !w.log.Core().Enabled(zap.InfoLevel) { // no fields built when disabled
		return
	}
	for _, c := range ef.cancels {
		if c.s == nil {
			continue
		}
		w.log.Info("watchdog: session cancelled", zap.String("session_id", c.s.id),
			zap.Int("window", int(c.s.window)), zap.Error(c.cause))
	}
}
