package watchdog

import (
	"math"
	"time"

	"go.uber.org/zap"
)

// schedule is the Watchdog's one scheduler goroutine. It sleeps until the
// clock timer for the earliest deadline wakes it, or Check asks it to settle,
// then decides every session that is due.
func (w *Watchdog) schedule() {
	for {
		select {
		case <-w.done:
			return
		case <-w.wakeCh:
			w.runDue()
		case req := <-w.checkCh:
			w.runDue()
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

type firing struct {
	s *Session
	v *VerdictError
}

// runDue decides every session due at the clock's now, applies the cancels
// and re-arms the timer for the next deadline. Events go to the recorder; no
// store, log or user call runs under the lock.
func (w *Watchdog) runDue() {
	now := w.clock.Now()
	nowNs := toNanos(now)
	var fired []firing
	w.mu.Lock()
	for it := w.heap.PopDue(nowNs); it != nil; it = w.heap.PopDue(nowNs) {
		s := it.Value
		v := decideSession(s, now)
		if v.Action == continueAction {
			w.heap.Push(&s.item, toNanos(v.Next))
			continue
		}
		e := w.event(s, KindCancel, now)
		e.Reason, e.StopReasonCode, e.FiredAt = v.Reason, StopWallClockExceeded, e.OccurredAt
		ve := &VerdictError{
			SessionID: s.id, Window: s.window, Reason: v.Reason,
			Elapsed: v.Elapsed, Budget: v.Budget, FiredAt: e.FiredAt,
		}
		s.state.Store(stateEnded)
		s.endCause = ve
		delete(w.sessions, s.id)
		w.rec.enqueue(e)
		fired = append(fired, firing{s, ve})
	}
	w.mu.Unlock()
	w.rearm()
	for _, f := range fired {
		f.s.cancel(f.v)
	}
	for _, f := range fired {
		w.log.Info("watchdog: session cancelled", zap.String("session_id", f.s.id),
			zap.Int("window", f.s.window), zap.String("reason", f.v.Reason),
			zap.Duration("elapsed", f.v.Elapsed), zap.Duration("budget", f.v.Budget))
	}
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
	if !closed {
		w.setTimerLocked(due)
	}
}

// rearm arms the clock timer for the earliest deadline in the heap. Holding
// timerMu while reading the heap orders it with armIfEarlier: a deadline
// pushed after the read arms its own timer if it is earlier.
func (w *Watchdog) rearm() {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	w.mu.Lock()
	top := w.heap.Peek()
	closed := w.closed
	var due int64
	if top != nil {
		due = top.Due
	}
	w.mu.Unlock()
	if top == nil || closed {
		if w.timer != nil {
			w.timer.Stop()
			w.timer = nil
		}
		w.armed = false
		return
	}
	w.setTimerLocked(due)
}

func (w *Watchdog) setTimerLocked(due int64) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.armed, w.armedAt = true, due
	now := toNanos(w.clock.Now())
	d := time.Duration(0)
	if due > now {
		if now < 0 && due > math.MaxInt64+now {
			d = math.MaxInt64
		} else {
			d = time.Duration(due - now)
		}
	}
	w.timer = w.clock.AfterFunc(d, w.wake)
}
