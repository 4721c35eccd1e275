package watchdog

import "time"

// SetWorkspaceHook installs f, called with the changed path after each
// workspace change the monitor records. Call it before the first
// WatchWorkspace.
func SetWorkspaceHook(w *Watchdog, f func(*Session, string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wsHook = f
}

// StepWallClock steps the wall time of every later reading of w's Clock by
// d, while the time elapsed between readings flows on: what NTP or an
// operator setting the system clock does to the real clock.
func StepWallClock(w *Watchdog, d time.Duration) { w.wallSkew.Add(int64(d)) }

// SetMaxQueued sets the recorder queue's bound for new sessions; it returns
// a func restoring it.
func SetMaxQueued(n int) (restore func()) {
	old := maxQueued
	maxQueued = n
	return func() { maxQueued = old }
}

// SetArmHook installs f, called with the timer's lock held each time the
// real clock's timer is armed, between the store of the instant it is armed
// for and the timer's reset. Call it before the first Start.
func SetArmHook(w *Watchdog, f func()) { w.armHook = f }

// checkpointPass runs one checkpoint pass and keeps its keys, as the
// heartbeat does after a successful call.
func checkpointPass(w *Watchdog) int {
	cps, _, ss, keys := w.checkpoints(0, 0)
	for i, s := range ss {
		s.ckpt[0].Store(keys[i])
	}
	return len(cps)
}
