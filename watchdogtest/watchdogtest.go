// Package watchdogtest helps test code that uses package watchdog on a
// *clock.Mock from github.com/benbjohnson/clock.
//
// A Mock runs timer callbacks on new goroutines, after Add has moved its
// clock on, so a verdict woken by a timer may see any instant up to the end
// of the Add. Advance removes that race: it stops the clock at every instant
// at which a verdict is due and settles there, so every fire happens at its
// exact due instant, as on an ideal real clock, and every recorded fired_at
// and elapsed_seconds is the same on every run.
package watchdogtest

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
)

// Settle waits, without moving any clock, until each of ws has taken the
// evidence that reaches it on the library's own goroutines and that
// happened before the call, then settles at its clock's now: it calls
// Check on each. The source it covers is the workspace monitor (Session.
// WatchWorkspace, Policy.WorkspaceRoot): a file written before Settle is
// evidence once it returns, dated by the Clock's reading then (on Linux,
// where the watcher keeps its events in order; see docs/testing.md). So a
// file written at mock +8 s, then Settle, is dated +8 s, where a mock moved
// on before the monitor read the change would date it later.
//
// Evidence from goroutines of yours is yours to wait for: exec's copy of a
// command's output into Session.Writer (cmd.Stdout = s.Writer(...)) runs
// on exec's goroutine, so wait for cmd.Wait, or for a write you observe
// through a writer of your own, before Settle or Advance.
//
// It returns the first Check error (ErrClosed after Close, ctx's error).
func Settle(ctx context.Context, ws ...*watchdog.Watchdog) error {
	return checkAll(ctx, ws)
}

// Advance moves mock forward by d. It first settles at the mock's current
// instant (see Settle): evidence of the workspace monitor that happened
// before it is dated at that instant, and the actions and records of calls
// made before it (a liveness rule's action decided by ReportLiveness, say)
// run and are recorded at that instant. Then it stops at every instant within d at
// which one of ws has a verdict due, and calls Check on each of ws there and
// at the end. When it returns nil, every verdict due at or before the
// mock's new now has been decided, applied and recorded (or queued for retry
// when the store failed). It returns the first Check error, or an error for
// a negative d.
//
// Do not call Advance concurrently with Start, Resume or another Advance on
// the same mock: a session started mid-step may fire late.
func Advance(ctx context.Context, mock *clock.Mock, d time.Duration, ws ...*watchdog.Watchdog) error {
	if d < 0 {
		return fmt.Errorf("watchdogtest: negative duration %v", d)
	}
	// Settle where the clock is first: what calls made before Advance
	// queued (an action a ReportLiveness decided, a record) runs and is
	// recorded at their instant, before the clock moves on.
	if err := checkAll(ctx, ws); err != nil {
		return err
	}
	target := mock.Now().Add(d)
	for {
		next, ok := nextDeadline(ws)
		if !ok || next.After(target) {
			break
		}
		if now := mock.Now(); next.After(now) {
			mock.Add(next.Sub(now))
		}
		// Settle at next. Something may become due at next again after a
		// Check, from a goroutine of the caller's (a handler whose call
		// ends pulls its session's next look in to now): settle again, a
		// few times, before giving up.
		for try := 0; ; try++ {
			if err := checkAll(ctx, ws); err != nil {
				return err
			}
			again, ok := nextDeadline(ws)
			if !ok || again.After(next) {
				break
			}
			if try == 3 {
				// Nothing was decided at next (a Watchdog refused to
				// settle); avoid spinning.
				return fmt.Errorf("watchdogtest: a verdict due at %v was not decided", next)
			}
		}
	}
	if now := mock.Now(); target.After(now) {
		mock.Add(target.Sub(now))
	}
	return checkAll(ctx, ws)
}

func nextDeadline(ws []*watchdog.Watchdog) (time.Time, bool) {
	var next time.Time
	found := false
	for _, w := range ws {
		if t, ok := w.NextDeadline(); ok && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	return next, found
}

func checkAll(ctx context.Context, ws []*watchdog.Watchdog) error {
	for _, w := range ws {
		if err := w.Check(ctx); err != nil {
			return err
		}
	}
	return nil
}
