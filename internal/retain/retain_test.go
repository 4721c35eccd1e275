package retain

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

// ix is an Index of int handles that records what it drops.
type ix struct {
	*Index[int]
	dropped []int
	n       int
}

func newIx(p Policy) *ix {
	x := &ix{}
	x.Index = New(p, func(h int) { x.dropped = append(x.dropped, h) })
	return x
}

// add adds an event and returns its handle.
func (x *ix) add(id string, window int, terminal bool, at time.Time) int {
	x.n++
	term := ""
	if terminal {
		term = "t" + string(rune('0'+x.n%10))
	}
	x.Add(id, window, term, at, x.n)
	return x.n
}

func (x *ix) handles(id string) []int {
	var out []int
	x.Each(id, func(h int) { out = append(out, h) })
	return out
}

func TestZeroPolicyKeepsEverything(t *testing.T) {
	x := newIx(Policy{})
	for w := 1; w <= 50; w++ {
		x.add("s", w, false, t0.Add(time.Duration(w)*time.Hour))
		x.add("s", w, true, t0.Add(time.Duration(w)*time.Hour))
	}
	if len(x.dropped) != 0 || x.Live() != 100 || x.Len("s") != 100 {
		t.Fatalf("dropped %v, live %d", x.dropped, x.Live())
	}
}

func TestWindowsKeepsTheLastEndedWindowsAndTheOpenOne(t *testing.T) {
	x := newIx(Policy{Windows: 1})
	a := x.add("s", 1, false, t0)
	b := x.add("s", 1, true, t0)
	c := x.add("s", 2, false, t0) // window 2 opens: 1 is the one ended window kept
	if len(x.dropped) != 0 {
		t.Fatalf("dropped %v before a second window ended", x.dropped)
	}
	d := x.add("s", 2, true, t0)
	if !slices.Equal(x.dropped, []int{a, b}) || !slices.Equal(x.handles("s"), []int{c, d}) {
		t.Fatalf("dropped %v, kept %v", x.dropped, x.handles("s"))
	}
	if id, ok := x.Terminal("s", 1); !ok || id != "" {
		t.Fatalf("forgotten window 1: Terminal = %q, %v; want decided", id, ok)
	}
	if _, ok := x.Terminal("s", 2); !ok {
		t.Fatal("window 2's terminal is not known")
	}
	late := x.add("s", 1, false, t0) // a late event of the forgotten window
	if x.dropped[len(x.dropped)-1] != late || x.Len("s") != 2 {
		t.Fatalf("a late event of a forgotten window is kept: %v", x.handles("s"))
	}
}

func TestAfterForgetsAnEndedSessionOnTheEventsClock(t *testing.T) {
	x := newIx(Policy{After: time.Hour})
	x.add("old", 1, false, t0)
	x.add("old", 1, true, t0.Add(time.Second)) // ends at t0+1s
	x.add("open", 1, false, t0)
	x.add("other", 1, false, t0.Add(time.Hour)) // 1s short
	if x.Len("old") != 2 {
		t.Fatal("forgotten before its hour")
	}
	x.add("other", 1, false, t0.Add(time.Hour+time.Second))
	if x.Len("old") != 0 || x.Len("open") != 1 {
		t.Fatalf("old %d events, open %d; want 0 and 1", x.Len("old"), x.Len("open"))
	}
	if _, ok := x.Terminal("old", 1); ok {
		t.Fatal("a forgotten session still has a terminal event")
	}
	// An event far in the future never forgets an open window.
	x.add("other", 1, false, t0.Add(1000*time.Hour))
	if x.Len("open") != 1 || x.Len("other") != 3 {
		t.Fatal("an open window was forgotten")
	}
}

func TestAfterSparesASessionResumedBeforeItsTime(t *testing.T) {
	x := newIx(Policy{After: time.Hour})
	x.add("s", 1, true, t0)
	x.add("s", 2, false, t0.Add(30*time.Minute)) // resumed
	x.add("x", 1, false, t0.Add(5*time.Hour))
	if x.Len("s") != 2 {
		t.Fatal("a resumed session was forgotten")
	}
	x.add("s", 2, true, t0.Add(6*time.Hour))
	x.add("x", 1, false, t0.Add(7*time.Hour-time.Nanosecond))
	if x.Len("s") != 3 {
		t.Fatal("forgotten before an hour after its second end")
	}
	x.add("x", 1, false, t0.Add(7*time.Hour))
	if x.Len("s") != 0 {
		t.Fatal("not forgotten an hour after its second end")
	}
}

func TestAfterNeverForgetsEarlyWhenEndsAreOutOfOrder(t *testing.T) {
	x := newIx(Policy{After: time.Hour})
	x.add("late", 1, true, t0.Add(2*time.Hour)) // ended first in append order, later in time
	x.add("early", 1, true, t0)
	x.add("x", 1, false, t0.Add(2*time.Hour))
	if x.Len("early") != 1 { // due, but waits behind "late": later, never early
		t.Fatal("forgotten out of order")
	}
	x.add("x", 1, false, t0.Add(3*time.Hour))
	if x.Len("early") != 0 || x.Len("late") != 0 {
		t.Fatalf("early %d, late %d; want both forgotten", x.Len("early"), x.Len("late"))
	}
}

func TestATerminalWithNoInstantEndsAtTheLatestOne(t *testing.T) {
	x := newIx(Policy{After: time.Hour})
	x.add("x", 1, false, t0.Add(time.Hour))
	x.add("s", 1, true, time.Time{})
	if x.Len("s") != 1 {
		t.Fatal("a terminal event with no occurred_at was forgotten at once")
	}
	x.add("x", 1, false, t0.Add(2*time.Hour))
	if x.Len("s") != 0 {
		t.Fatal("not forgotten an hour after the latest instant at its end")
	}
}

func TestRaiseFloorsCountsWindowsBelowTheOldestHeldAsEnded(t *testing.T) {
	x := newIx(Policy{Windows: 1})
	x.add("s", 4, true, t0)
	x.add("s", 5, false, t0)
	x.RaiseFloors()
	if _, ok := x.Terminal("s", 3); !ok {
		t.Fatal("window 3, below the oldest held, is not ended")
	}
	if _, ok := x.Terminal("s", 5); ok {
		t.Fatal("the open window counts as ended")
	}
}

func TestAllMovesHandlesAndShrinkKeepsThem(t *testing.T) {
	x := newIx(Policy{})
	x.add("a", 1, false, t0)
	x.add("b", 1, false, t0)
	x.All(func(h *int) { *h += 100 })
	x.Shrink()
	if !slices.Equal(x.handles("a"), []int{101}) || !slices.Equal(x.handles("b"), []int{102}) {
		t.Fatalf("a %v b %v", x.handles("a"), x.handles("b"))
	}
}

// The session last looked up, which the Index remembers, is forgotten
// with the session.
func TestAForgottenSessionIsNotRemembered(t *testing.T) {
	x := newIx(Policy{After: time.Hour})
	x.add("s", 1, true, t0)
	x.add("s", 1, false, t0.Add(2*time.Hour)) // s is looked up, then forgotten
	if x.Len("s") != 0 {
		t.Fatalf("s holds %d events", x.Len("s"))
	}
	if _, ok := x.Terminal("s", 1); ok {
		t.Fatal("a forgotten session's window is still ended")
	}
	x.add("s", 1, false, t0.Add(3*time.Hour))
	if x.Len("s") != 1 {
		t.Fatalf("s holds %d events, want 1", x.Len("s"))
	}
}
