package watchdog

import (
	"context"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/sched"
)

// defaultWaitTimeout is the timeout of a wait whose server supplied none.
const defaultWaitTimeout = 30 * time.Minute

// waitTimeout resolves a server-supplied timeout: a positive one as is; 0
// (unset) or a negative one falls back to defaultWaitTimeout.
func waitTimeout(server time.Duration) time.Duration {
	if server > 0 {
		return server
	}
	return defaultWaitTimeout
}

// waiter is a session's armed waiting watchdog.
type waiter struct {
	s    *Session
	gen  uint64
	item sched.Item[timed]
	fn   func(ctx context.Context, s *Session, generation uint64)
	from time.Time
	d    time.Duration
}

// Wait puts the session in the waiting state (waiting for external events)
// and arms the waiting watchdog for timeout, the server-supplied timeout: a
// positive value is used as is, 0 (none supplied) or a negative value means
// 30 minutes. It returns the arm's generation. Each arm supersedes the
// previous one; EndWait and the end of the window bump the generation, so a
// stale timer never fires. While waiting, the idle rule does not fire (the
// wall clock and the ceilings still do).
//
// On fire the session is NOT cancelled: the Watchdog records a
// runtime.watchdog.wait_timeout verdict, leaves the waiting state, and calls
// onTimeout exactly once, on the session's action goroutine (for example to
// emit a synthetic result into the agent's next turn), unless Close comes
// first. onTimeout may be nil; it must not call Check or Close.
func (s *Session) Wait(timeout time.Duration, onTimeout func(ctx context.Context, s *Session, generation uint64)) uint64 {
	w := s.w
	d := waitTimeout(timeout)
	now := w.now()
	w.mu.Lock()
	r := s.rw()
	if r.waiter != nil {
		w.heap.Remove(&r.waiter.item)
	}
	s.gen++
	gen := s.gen
	if s.state.Load() != stateRunning {
		r.waiter = nil
		w.mu.Unlock()
		return gen
	}
	wt := &waiter{s: s, gen: gen, fn: onTimeout, from: now, d: d}
	wt.item.Value = wt
	r.waiter = wt
	due := toNanos(now.Add(d))
	w.heap.Push(&wt.item, due)
	w.mu.Unlock()
	w.wakeBy(due)
	return gen
}

// EndWait leaves the waiting state (the conversation is back in progress):
// it bumps the generation, so the armed timer can no longer fire, and the
// idle rule applies again from now. It reports whether the session was
// waiting.
func (s *Session) EndWait() bool {
	w := s.w
	now := w.now()
	w.mu.Lock()
	s.gen++
	was := s.r().waiter != nil
	if was {
		w.heap.Remove(&s.rare.waiter.item)
		s.rare.waiter = nil
		s.since = toNanos(now) // silence while waiting is not idleness
		if s.state.Load() == stateRunning && !s.r().acting {
			w.pullInLocked(s, toNanos(now))
		}
	}
	w.mu.Unlock()
	if was {
		w.wakeBy(toNanos(now))
	}
	return was
}

func (wt *waiter) fireLocked(w *Watchdog, now time.Time, ef *effects) {
	s := wt.s
	if s.r().waiter != wt || s.gen != wt.gen || s.state.Load() != stateRunning {
		return // superseded: a stale timer never fires
	}
	if !decide.Expired(wt.from, wt.d, now) {
		w.heap.Push(&wt.item, toNanos(wt.from.Add(wt.d)))
		return
	}
	s.rare.waiter = nil
	s.since = toNanos(now)
	e := s.event(KindWaitTimeout, now)
	e.Reason, e.Generation = "wait_timeout", wt.gen
	e.MeasureSeconds, e.LimitSeconds = now.Sub(wt.from).Seconds(), wt.d.Seconds()
	w.record(ef, e)
	if !s.r().acting {
		w.pullInLocked(s, toNanos(now))
	}
	if wt.fn != nil {
		fn, gen := wt.fn, wt.gen
		ef.acts = append(ef.acts, actItem{s: s, call: func(ctx context.Context) { fn(ctx, s, gen) }})
	}
}
