package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// lines is an io.Writer that hands every write to the test, so the test
// knows the evidence of a job was recorded before it moves the clock.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// newMock returns a mock clock set to a fixed, recent date: a new Mock starts
// in 1970.
func newMock() *clock.Mock {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	return mock
}

// With a mock clock: the session is cancelled exactly when its wall-clock
// budget runs out, and Drain says why.
func TestMockClockDrainIsCancelledAtTheBudget(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)

	start := mock.Now()
	s, err := w.Start(ctx, "drain", start, watchdog.Policy{WallClock: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	jobs, out := make(chan string), make(lines)
	done := make(chan error, 1)
	go func() { done <- Drain(s.Context(), jobs, s.Writer(watchdog.ChannelStdout, out)) }()

	jobs <- "fetch"
	testwait.For(t, out, "the job's line to be written") // the job's line was written
	// 59 s later nothing has fired yet...
	if err := watchdogtest.Advance(ctx, mock, 59*time.Second, w); err != nil {
		t.Fatal(err)
	}
	if err := s.Context().Err(); err != nil {
		t.Fatalf("cancelled before the budget: %v", context.Cause(s.Context()))
	}
	// ...and the budget runs out once the window is strictly older than it,
	// at start + 1 min + 1 ns. Advance stops at that exact instant and
	// settles there.
	if err := watchdogtest.Advance(ctx, mock, 2*time.Second, w); err != nil {
		t.Fatal(err)
	}
	err = testwait.For(t, done, "Drain to return")
	if !errors.Is(err, watchdog.ErrWallClockExceeded) {
		t.Fatalf("Drain returned %v, want ErrWallClockExceeded", err)
	}
	if !errors.Is(context.Cause(s.Context()), watchdog.ErrWallClockExceeded) {
		t.Fatal("the session's cause is not ErrWallClockExceeded")
	}
	// The typed error carries the details.
	var v *watchdog.VerdictError
	if !errors.As(err, &v) || !v.FiredAt.Equal(start.Add(time.Minute+time.Nanosecond)) {
		t.Fatalf("got %#v, want a *VerdictError fired at start + 1 min + 1 ns", v)
	}
}

// With a mock clock: a steady stream of jobs keeps the session alive under
// the idle rule; once the jobs stop, silence past the idle window cancels it.
func TestMockClockSilenceIsAnIdleTimeout(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)

	policy := watchdog.Policy{
		WallClock:    time.Hour,
		IdleWindow:   10 * time.Second, // silent for more than 10 s is stale...
		SettleChecks: 1,                // ...and one stale observation is enough
		EvidenceTTL:  watchdog.Off,     // only stdout counts in this example
	}
	s, err := w.Start(ctx, "drain", mock.Now(), policy)
	if err != nil {
		t.Fatal(err)
	}
	jobs, out := make(chan string), make(lines)
	done := make(chan error, 1)
	go func() { done <- Drain(s.Context(), jobs, s.Writer(watchdog.ChannelStdout, out)) }()

	for _, job := range []string{"a", "b", "c", "d", "e"} { // one job every 8 s
		jobs <- job
		testwait.For(t, out, "the job's line to be written")
		if err := watchdogtest.Advance(ctx, mock, 8*time.Second, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Context().Err(); err != nil {
		t.Fatalf("a working session was cancelled: %v", context.Cause(s.Context()))
	}
	if err := watchdogtest.Advance(ctx, mock, 3*time.Second, w); err != nil { // 11 s of silence
		t.Fatal(err)
	}
	if err := testwait.For(t, done, "Drain to return"); !errors.Is(err, watchdog.ErrIdleExceeded) {
		t.Fatalf("Drain returned %v, want ErrIdleExceeded", err)
	}
}

// With a mock clock: Drain that finishes in time is not touched, and Stop
// records a normal end.
func TestMockClockDrainFinishesInTime(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)

	s, err := w.Start(ctx, "drain", mock.Now(), watchdog.Policy{WallClock: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make(chan string, 2)
	jobs <- "fetch"
	jobs <- "parse"
	close(jobs)
	if err := Drain(s.Context(), jobs, s.Writer(watchdog.ChannelStdout, io.Discard)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := watchdogtest.Advance(ctx, mock, time.Hour, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil { // flushes the events
		t.Fatal(err)
	}
	evs, err := w.Store().Load(ctx, "drain")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != watchdog.KindStart || evs[1].Kind != watchdog.KindStop {
		t.Fatalf("recorded %d events, want start and stop", len(evs))
	}
}

// Inside a synctest bubble the default real clock runs on the bubble's fake
// time: Drain blocks on a producer that stalls, time jumps straight to the
// budget, and the test takes no real time. Create the Watchdog inside the
// bubble and close it there.
func TestSynctestDrainIsCancelledAtTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := watchdog.New() // the default real clock
		start := time.Now() // fake time, inside the bubble
		s, err := w.Start(ctx, "drain", start, watchdog.Policy{WallClock: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		jobs := make(chan string)
		go func() { // your own code may sleep: it is fake time too
			jobs <- "fetch"
			time.Sleep(10 * time.Second)
			jobs <- "parse"
			// ...and then the producer stalls.
		}()

		err = Drain(s.Context(), jobs, s.Writer(watchdog.ChannelStdout, io.Discard))
		if !errors.Is(err, watchdog.ErrWallClockExceeded) {
			t.Fatalf("Drain returned %v, want ErrWallClockExceeded", err)
		}
		if got := time.Since(start); got != time.Minute+time.Nanosecond {
			t.Fatalf("cancelled after %v, want exactly 1m0.000000001s", got)
		}

		synctest.Wait() // every goroutine is idle: the cancel event is recorded
		evs, err := w.Store().Load(ctx, "drain")
		if err != nil {
			t.Fatal(err)
		}
		if last := evs[len(evs)-1]; last.Kind != watchdog.KindCancel || last.Reason != "wall_clock_exceeded" {
			t.Fatalf("last event %s (%s), want a wall_clock_exceeded cancel", last.Kind, last.Reason)
		}
		// Close inside the bubble: synctest.Test fails if a goroutine
		// the Watchdog started is still running when the bubble ends.
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
