package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/thejerf/suture/v4"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// newMock returns a mock clock set to a fixed, recent date: a new Mock
// starts in 1970.
func newMock() *clock.Mock {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	return mock
}

// stallingLoop is a pipeline loop that stalls: it reports each window it
// starts on starts, prints nothing, and when its context ends reports the
// cause on ended, then waits for the test on release before it returns.
// Holding the return lets the test finish moving the mock clock before the
// next window opens, so every window starts at an instant the test knows.
type stallingLoop struct {
	starts  chan int
	ended   chan error
	release chan struct{}
}

func newStallingLoop() *stallingLoop {
	return &stallingLoop{make(chan int), make(chan error), make(chan struct{})}
}

func (l *stallingLoop) run(ctx context.Context) error {
	l.starts <- watchdog.FromContext(ctx).Window()
	<-ctx.Done()
	l.ended <- context.Cause(ctx)
	<-l.release
	return context.Cause(ctx)
}

// events returns the kinds, windows and reasons recorded for id, after
// settling w.
func events(t *testing.T, w *watchdog.Watchdog, id string) []watchdog.Event {
	t.Helper()
	ctx := context.Background()
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := w.Store().Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A loop that stalls is cancelled by the watchdog's idle rule with a
// recorded decision and cancel; suture sees Serve return the verdict and
// restarts the service at once, and the restart resumes the session into
// window 2, which opens at the instant of the restart under the same
// policy.
func TestStalledLoopIsCancelledWithARecordedVerdictAndSutureResumesItInTheNextWindow(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)

	loop := newStallingLoop()
	terminated := make(chan suture.EventServiceTerminate, 4)
	svc := &Service{
		W:      w,
		ID:     "agent-7",
		Policy: watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second}, // settle: 3 looks 10 s apart
		Loop:   loop.run,
	}
	sup := suture.New("agents", suture.Spec{EventHook: func(e suture.Event) {
		if e, ok := e.(suture.EventServiceTerminate); ok {
			terminated <- e
		}
	}})
	sup.Add(svc)
	supCtx, stop := context.WithCancel(ctx)
	defer stop()
	supDone := sup.ServeBackground(supCtx)

	start := mock.Now()
	if win := testwait.For(t, loop.starts, "the first Serve to start"); win != 1 {
		t.Fatalf("the first Serve ran window %d, want 1", win)
	}
	// Silent from the window's start: stale once silent for more than 30 s
	// (strictly), and the idle rule acts at its third stale look, 10 s
	// apart: 50 s + 1 ns in.
	if err := watchdogtest.Advance(ctx, mock, 45*time.Second, w); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-loop.ended:
		t.Fatalf("cancelled before the settle window ended: %v", cause)
	default:
	}
	if err := watchdogtest.Advance(ctx, mock, 15*time.Second, w); err != nil { // to start + 60 s
		t.Fatal(err)
	}
	cause := testwait.For(t, loop.ended, "window 1's loop to end")
	var v *watchdog.VerdictError
	if !errors.As(cause, &v) || !errors.Is(cause, watchdog.ErrIdleExceeded) || v.Window != 1 {
		t.Fatalf("window 1 ended with %v, want an idle verdict on window 1", cause)
	}
	if want := start.Add(50*time.Second + time.Nanosecond); !v.FiredAt.Equal(want) {
		t.Fatalf("fired at %v, want %v (the third stale look)", v.FiredAt, want)
	}

	loop.release <- struct{}{} // window 1's loop returns: Serve returns the verdict
	e := testwait.For(t, terminated, "suture's restart event")
	if !e.Restarting || !errors.Is(e.Err.(error), watchdog.ErrIdleExceeded) {
		t.Fatalf("suture got %v, want a restart after the idle verdict", e)
	}
	if win := testwait.For(t, loop.starts, "suture's restart to start"); win != 2 {
		t.Fatalf("suture's restart ran window %d, want 2", win)
	}

	var kinds []string
	var resumed watchdog.Event
	for _, e := range events(t, w, svc.ID) {
		kinds = append(kinds, fmt.Sprintf("%s/%s/%d", e.Kind, e.Reason, e.SettleCount))
		if e.Kind == watchdog.KindResume {
			resumed = e
		}
	}
	want := []string{ // kind/reason/settle count
		watchdog.KindStart + "//0",
		watchdog.KindVerdict + "//1",               // the first stale look, at 30 s + 1 ns
		watchdog.KindVerdict + "//2",               // the second, 10 s later
		watchdog.KindDecision + "/idle_exceeded/3", // the third decides: HARD_STOP
		watchdog.KindCancel + "/idle_exceeded/0",   // and the cancel is its outcome
		watchdog.KindResume + "//0",                // suture's restart: window 2
	}
	if len(kinds) != len(want) {
		t.Fatalf("recorded %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("recorded %v, want %v", kinds, want)
		}
	}
	if resumed.Window != 2 || !resumed.WindowStartedAt.Equal(start.Add(time.Minute)) || !resumed.SessionStartedAt.Equal(start) {
		t.Fatalf("resume event: window %d from %v (session from %v), want window 2 from %v (session from %v)",
			resumed.Window, resumed.WindowStartedAt, resumed.SessionStartedAt, start.Add(time.Minute), start)
	}

	// Stopping the supervisor ends window 2 as "canceled", resumable.
	stop()
	if cause := testwait.For(t, loop.ended, "window 2's loop to end"); !errors.Is(cause, context.Canceled) {
		t.Fatalf("window 2 ended with %v, want context.Canceled", cause)
	}
	loop.release <- struct{}{}
	testwait.For(t, supDone, "the supervisor to return")
	evs := events(t, w, svc.ID)
	if last := evs[len(evs)-1]; last.Kind != watchdog.KindStop || last.Reason != watchdog.StopCanceled || last.Window != 2 {
		t.Fatalf("last event %s/%s in window %d, want a stop, canceled, in window 2", last.Kind, last.Reason, last.Window)
	}
}

// serve runs svc.Serve on a goroutine and returns its result channel.
func serve(ctx context.Context, svc *Service) <-chan error {
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx) }()
	return done
}

// A window that ends past the session ceiling is not resumable: Serve
// returns suture.ErrDoNotRestart with the verdict, so suture removes the
// service instead of opening windows that would be cancelled at once.
func TestSessionPastItsCeilingIsNotRestarted(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	loop := newStallingLoop()
	svc := &Service{W: w, ID: "agent-8", Loop: loop.run,
		Policy: watchdog.Policy{WallClock: time.Minute, SessionCeiling: 90 * time.Second}}

	done := serve(ctx, svc)
	testwait.For(t, loop.starts, "the first Serve to start")
	if err := watchdogtest.Advance(ctx, mock, 61*time.Second, w); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, loop.ended, "window 1's loop to end")
	loop.release <- struct{}{}
	if err := testwait.For(t, done, "the supervisor to return"); !errors.Is(err, watchdog.ErrWallClockExceeded) || errors.Is(err, suture.ErrDoNotRestart) {
		t.Fatalf("window 1: Serve returned %v, want the wall-clock verdict, to be restarted", err)
	}

	done = serve(ctx, svc) // what suture does next
	if win := testwait.For(t, loop.starts, "the second Serve to start"); win != 2 {
		t.Fatalf("the second Serve ran window %d, want 2", win)
	}
	if err := watchdogtest.Advance(ctx, mock, 30*time.Second, w); err != nil { // the session is 91 s old
		t.Fatal(err)
	}
	testwait.For(t, loop.ended, "window 2's loop to end")
	loop.release <- struct{}{}
	err := testwait.For(t, done, "the supervisor to return")
	if !errors.Is(err, watchdog.ErrSessionCeilingExceeded) || !errors.Is(err, suture.ErrDoNotRestart) {
		t.Fatalf("window 2: Serve returned %v, want the ceiling verdict and ErrDoNotRestart", err)
	}
}

// A loop that returns nil completed its work: Serve returns
// suture.ErrDoNotRestart, and the window is recorded as completed.
func TestCompletedLoopIsNotRestarted(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	var ended watchdog.Result
	svc := &Service{W: w, ID: "job-1",
		Loop:  func(context.Context) error { return nil },
		Ended: func(res watchdog.Result, _ error) { ended = res }}

	if err := svc.Serve(ctx); !errors.Is(err, suture.ErrDoNotRestart) {
		t.Fatalf("Serve returned %v, want ErrDoNotRestart", err)
	}
	if ended.StopReasonCode != watchdog.StopCompleted || ended.Window != 1 {
		t.Fatalf("Ended got %+v, want window 1 completed", ended)
	}
	evs := events(t, w, svc.ID)
	if last := evs[len(evs)-1]; last.Kind != watchdog.KindStop || last.Reason != watchdog.StopCompleted {
		t.Fatalf("last event %s/%s, want a stop, completed", last.Kind, last.Reason)
	}
}

// Closing the Watchdog while a window runs ends Serve with
// suture.ErrDoNotRestart and records no terminal event: a Service of the
// next process, on the same store, continues the same window (same
// window number, same start) instead of opening a new one.
func TestClosedWatchdogIsNotRestartedAndTheNextProcessContinuesTheWindow(t *testing.T) {
	ctx := context.Background()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	loop := newStallingLoop()
	svc := &Service{W: w, ID: "agent-9", Loop: loop.run, Policy: watchdog.Policy{WallClock: time.Hour}}

	start := mock.Now()
	done := serve(ctx, svc)
	testwait.For(t, loop.starts, "Serve to start")
	if err := watchdogtest.Advance(ctx, mock, 10*time.Minute, w); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close(ctx) }()
	if cause := testwait.For(t, loop.ended, "the loop to end"); !errors.Is(cause, watchdog.ErrClosed) {
		t.Fatalf("the window ended with %v, want ErrClosed", cause)
	}
	loop.release <- struct{}{}
	if err := testwait.For(t, done, "the supervisor to return"); !errors.Is(err, suture.ErrDoNotRestart) || !errors.Is(err, watchdog.ErrClosed) {
		t.Fatalf("Serve returned %v, want ErrClosed and ErrDoNotRestart", err)
	}
	if err := testwait.For(t, closed, "Close to return"); err != nil {
		t.Fatal(err)
	}

	// The next process: a new Watchdog on the same store.
	w2 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w2.Close(ctx)
	svc2 := &Service{W: w2, ID: svc.ID, Loop: loop.run, Policy: svc.Policy}
	done = serve(ctx, svc2)
	if win := testwait.For(t, loop.starts, "Serve to start"); win != 1 {
		t.Fatalf("the next process ran window %d, want window 1 continued", win)
	}
	// The budget counts from the original start: it runs out 50 minutes
	// later, not 60.
	if err := watchdogtest.Advance(ctx, mock, 50*time.Minute+time.Second, w2); err != nil {
		t.Fatal(err)
	}
	cause := testwait.For(t, loop.ended, "the loop to end")
	var v *watchdog.VerdictError
	if !errors.As(cause, &v) || !errors.Is(cause, watchdog.ErrWallClockExceeded) ||
		!v.FiredAt.Equal(start.Add(time.Hour+time.Nanosecond)) {
		t.Fatalf("the continued window ended with %v, want the wall clock at start + 1 h + 1 ns", cause)
	}
	loop.release <- struct{}{}
	if err := testwait.For(t, done, "the supervisor to return"); !errors.Is(err, watchdog.ErrWallClockExceeded) || errors.Is(err, suture.ErrDoNotRestart) {
		t.Fatalf("Serve returned %v, want the verdict, to be restarted", err)
	}
}

// A Service without its Watchdog, id or loop is misconfigured: Serve
// returns suture.ErrDoNotRestart at once instead of failing in a loop.
func TestMisconfiguredServiceIsNotRestarted(t *testing.T) {
	ctx := context.Background()
	w := watchdog.New(watchdog.WithClock(newMock()))
	defer w.Close(ctx)
	for name, svc := range map[string]*Service{
		"nil":         nil,
		"no watchdog": {ID: "a", Loop: func(context.Context) error { return nil }},
		"no id":       {W: w, Loop: func(context.Context) error { return nil }},
		"no loop":     {W: w, ID: "a"},
		"bad policy":  {W: w, ID: "a", Loop: func(context.Context) error { return nil }, Policy: watchdog.Policy{WallClock: -time.Second}},
	} {
		if err := svc.Serve(ctx); !errors.Is(err, suture.ErrDoNotRestart) {
			t.Errorf("%s: Serve returned %v, want ErrDoNotRestart", name, err)
		}
	}
}
