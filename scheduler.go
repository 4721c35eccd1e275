package watchdog

import (
	"math"
	"time"

	"go.uber.org/zap"
)

// schedule is the Watchdog's one scheduler goroutine: it runs a pass when
// the clock timer for the earliest deadline wakes it or Check asks it to.
func (w *Watchdog) schedule() {
	var rtC <-chan time.Time // the real clock's timer, read here directly
	if w.rt != nil {
		rtC = w.rt.C
	}
	for {
		select {
		case <-w.done:
			return
		case <-rtC:
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
// arms the timer for the next deadline. It runs on the scheduler goroutine
// only and reuses w.ef, so a pass allocates nothing of its own.
func (w *Watchdog) pass() {
	w.armedAt.Store(math.MaxInt64) // in a pass: a deadline pushed meanwhile arms its own timer
	now := w.leaseFirst(w.now())
	nowNs := min(toNanos(now), math.MaxInt64-1) // due at MaxInt64: past the timeline's end (2262), never
	ef := &w.ef
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
	w.mu.Unlock()
	if ok {
		w.arm(next, true)
	}
	if len(due) > 0 && w.tickObs != nil {
		w.tickObs.report(ef.lateness)
	}
	w.apply(ef)
}

// topDueLocked returns the heap's earliest due instant, and false if the
// heap holds none that can come. Called with w.mu held.
func (w *Watchdog) topDueLocked() (int64, bool) {
	top := w.heap.Peek()
	if top == nil || top.Due == math.MaxInt64 {
		return 0, false
	}
	return top.Due, true
}

// wakeBy arms the clock timer for due unless it is armed for due or
// earlier. Call it after pushing a deadline, with w.mu released: a fake
// clock advanced afterwards fires at due exactly.
func (w *Watchdog) wakeBy(due int64) { w.arm(due, false) }

// arm is the one path that arms the clock timer: for due, unless it is
// armed for an earlier instant (armedAt); see "The timer" in
// ARCHITECTURE.md. sched: the caller is the scheduler goroutine, whose
// previous timer it replaces. After Close, arm does nothing.
func (w *Watchdog) arm(due int64, sched bool) {
	if w.rt != nil {
		w.timerMu.Lock()
		if due < w.armedAt.Load() || (sched && w.armedAt.Load() == math.MaxInt64) {
			// armedAt before the timer, so that a pass the timer starts at
			// once (which sets MaxInt64 without timerMu) comes after this
			// store: else armedAt could keep a handled deadline, and no
			// later one would arm the timer again.
			w.armedAt.Store(due)
			if w.armHook != nil {
				w.armHook()
			}
			d := w.delay(due)
			w.rt.Reset(d)
		}
		w.timerMu.Unlock()
		return
	}
	for {
		cur := w.armedAt.Load()
		if due >= cur && !(sched && cur == math.MaxInt64) || cur == math.MinInt64 {
			return // armed early enough, or closed
		}
		if w.armedAt.CompareAndSwap(cur, min(cur, due)) {
			break
		}
	}
	t := w.clock.AfterFunc(w.delay(due), w.wakeFn)
	if t == nil {
		return // the Clock failed (see guardedClock): nothing to keep
	}
	if sched {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.timer = t
	}
}

// delay is the wait from the clock's now until due.
func (w *Watchdog) delay(due int64) time.Duration {
	now := toNanos(w.now())
	switch {
	case due <= now:
		return 0
	case now < 0 && due > math.MaxInt64+now:
		return math.MaxInt64
	}
	return time.Duration(due - now)
}

// closeTimer stops the real clock's timer for good, even while the
// scheduler goroutine is stuck in user code (a later arm of its does
// nothing); another Clock's timer once it returned (schedDone).
func (w *Watchdog) closeTimer(schedDone bool) {
	w.timerMu.Lock()
	w.armedAt.Store(math.MinInt64)
	if w.rt != nil {
		w.rt.Stop()
	}
	w.timerMu.Unlock()
	if schedDone && w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
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
