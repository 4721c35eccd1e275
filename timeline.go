package watchdog

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// The Watchdog's timeline. Every rule measures elapsed time between two
// readings of the Clock, never a difference of wall-clock readings, so a
// step of the system's clock (NTP, an operator) neither ends a session early
// nor leaves it unwatched. An instant on the timeline is the wall time of
// the Watchdog's first reading plus the time elapsed since then, measured by
// time.Time.Sub: with the real clock its readings carry the monotonic
// clock, which Sub uses; with a clock.Mock, or inside a testing/synctest
// bubble, the timeline is the clock's own time, exactly.
//
// What is recorded, and what the API returns, is wall-clock time: an
// instant of the timeline plus the wall clock's offset from it, which is
// zero until the wall clock is stepped (see now). All the instants of one
// event are shifted by the same offset, so their differences stay elapsed
// time and Replay re-derives the event exactly.

// offsetSlack is how far the wall clock may drift from the timeline (NTP
// slews it by up to 0.5 ms a second) before the offset follows it.
const offsetSlack = int64(time.Millisecond)

var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// toNanos converts t to Unix nanoseconds, saturating outside the int64 range.
func toNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanos):
		return math.MinInt64
	case t.After(maxNanos):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// addNanos is a + b, saturating.
func addNanos(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// now reads the Clock and returns the instant on the timeline, in UTC. It
// also moves the wall clock's offset when the wall clock drifted from the
// timeline by more than offsetSlack since the offset last moved.
func (w *Watchdog) now() time.Time {
	t := w.clock.Now()
	v := addNanos(w.epochNanos, int64(t.Sub(w.epoch)))
	off := addNanos(addNanos(toNanos(t), w.wallSkew.Load()), -v)
	if d := off - w.offset.Load(); d > offsetSlack || d < -offsetSlack {
		w.offset.Store(off)
	}
	return time.Unix(0, v).UTC()
}

// nowNanos is now in Unix ns, for the hot path (Touch, a call's
// progress): with the real clock, one reading of the monotonic clock only
// (time.Since), the timeline's own measure; the wall clock's offset is
// left to the other readings.
func (w *Watchdog) nowNanos() int64 {
	if w.rt != nil {
		return addNanos(w.epochNanos, int64(time.Since(w.epoch)))
	}
	return toNanos(w.now())
}

// wall converts t from the timeline to wall-clock time, at the current
// offset (zero unless the wall clock was stepped).
func (w *Watchdog) wall(t time.Time) time.Time {
	if off := w.offset.Load(); off != 0 && !t.IsZero() {
		return t.Add(time.Duration(off))
	}
	return t
}

// recOffset is the recorded instants' offset from the timeline: the wall
// clock's, less a fleet member's clock's offset from its store's (see
// readStoreClock). toRecord and fromRecord convert an instant to the record
// and back; a VerdictError's FiredAt is on the record, as its fired_at.
func (w *Watchdog) recOffset() time.Duration {
	return time.Duration(w.offset.Load() - w.storeSkew.Load())
}

func (w *Watchdog) fromRecord(t time.Time) time.Time { return t.Add(-w.recOffset()) }
func (w *Watchdog) toRecord(t time.Time) time.Time   { return t.Add(w.recOffset()) }

// wallNow is wall after a fresh reading of the Clock (which moves the
// offset if the wall clock was stepped). Never call it under a lock: the
// Clock is user code.
func (w *Watchdog) wallNow(t time.Time) time.Time {
	w.now()
	return w.wall(t)
}

// onTimeline converts wall-clock time t (a start given to Start) to the timeline, at the current offset.
func (w *Watchdog) onTimeline(t time.Time) time.Time {
	if off := w.offset.Load(); off != 0 && !t.IsZero() {
		return t.Add(-time.Duration(off))
	}
	return t
}

// shiftEvent moves every instant of e by off, the wall clock's offset when
// e was queued. Its evidence summary is shifted in place: it must be e's
// own (a summary shared by two events is shifted once).
func shiftEvent(e *Event, off int64) {
	if off == 0 {
		return
	}
	d := time.Duration(off)
	for _, t := range []*time.Time{&e.SessionStartedAt, &e.WindowStartedAt, &e.OccurredAt, &e.FiredAt, &e.ObservedSince, &e.GraceUntil, &e.BudgetFrom, &e.ProgressAt, &e.StopAt} {
		if !t.IsZero() {
			*t = t.Add(d)
		}
	}
	for _, en := range e.EvidenceSummary {
		if en.LastAt != nil {
			*en.LastAt = en.LastAt.Add(d)
		}
	}
	for i := range e.CallsInFlight {
		c := &e.CallsInFlight[i]
		c.StartedAt = c.StartedAt.Add(d)
		if !c.ProgressAt.IsZero() {
			c.ProgressAt = c.ProgressAt.Add(d)
		}
	}
}

// guardedClock wraps a Clock of the user's (any but the real one) so that a
// panic in it crashes nothing: a panicking Now returns the last reading
// that worked (time stands still until the Clock recovers), a panicking
// AfterFunc arms nothing; both are logged at error level.
type guardedClock struct {
	c    Clock
	uf   *userFaults
	last atomic.Int64 // the last reading that worked, Unix ns (0: none yet)
}

func (g *guardedClock) Now() (t time.Time) {
	defer func() {
		if p := recover(); p != nil {
			g.uf.recovered("watchdog: the Clock's Now panicked; using its last reading", zap.Any("panic", p))
			t = time.Now()
			if l := g.last.Load(); l != 0 {
				t = time.Unix(0, l)
			}
		}
	}()
	t = g.c.Now()
	g.last.Store(toNanos(t))
	return t
}

func (g *guardedClock) AfterFunc(d time.Duration, f func()) (t *clock.Timer) {
	defer func() {
		if p := recover(); p != nil {
			g.uf.recovered("watchdog: the Clock's AfterFunc panicked; the timer is not armed", zap.Any("panic", p))
			t = nil
		}
	}()
	return g.c.AfterFunc(d, f)
}
