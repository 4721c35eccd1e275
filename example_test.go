package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// newExampleClock returns a mock clock set to a fixed, recent date, as tests
// on *clock.Mock should be (a Mock starts in 1970).
func newExampleClock() *clock.Mock {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	return mock
}

// Start watches a session; when its window outruns the budget, its context is
// cancelled with a typed cause and one cancel event is recorded.
func ExampleWatchdog_Start() {
	ctx := context.Background()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)) // first: a fixed, recent date (a Mock starts in 1970)
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(ctx)

	s, err := w.Start(ctx, "cli-todo", mock.Now(), watchdog.Policy{WallClock: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	// Move the mock clock on and settle: every verdict due by then is
	// decided, applied and recorded, at its exact due instant.
	_ = watchdogtest.Advance(ctx, mock, 11*time.Second, w)

	fmt.Println(context.Cause(s.Context()))
	evs, _ := store.Load(ctx, "cli-todo")
	for _, e := range evs {
		fmt.Println(e.Kind, e.Reason, e.ElapsedSeconds)
	}
	// Output:
	// watchdog: session "cli-todo" window 1: wall_clock_exceeded: elapsed 10.000000001s > budget 10s
	// runtime.watchdog.start  0
	// runtime.watchdog.decision wall_clock_exceeded 10.000000001
	// runtime.watchdog.cancel wall_clock_exceeded 10.000000001
}

// Run wraps a pipeline loop and returns the result envelope. Here every
// iteration takes three seconds of mock time against a ten-second budget.
func ExampleWatchdog_Run() {
	ctx := context.Background()
	mock := newExampleClock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)

	res, err := w.Run(ctx, "cli-todo", watchdog.Policy{WallClock: 10 * time.Second},
		func(ctx context.Context) error {
			for i := 1; ctx.Err() == nil; i++ {
				// one iteration of work takes three seconds
				_ = watchdogtest.Advance(context.Background(), mock, 3*time.Second, w) //watchdog:unbounded the test's clock step must finish after the session ends
				fmt.Println("iteration", i, "done")
			}
			return ctx.Err()
		})
	fmt.Println(err)
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	// Output:
	// iteration 1 done
	// iteration 2 done
	// iteration 3 done
	// iteration 4 done
	// watchdog: session "cli-todo" window 1: wall_clock_exceeded: elapsed 10.000000001s > budget 10s
	// {"session_id":"cli-todo","stop_reason_code":"watchdog_wall_clock_exceeded","resumable":true,"window":1,"elapsed_seconds":10.000000001}
}

// Resume reads session_started_at back from the store, so a new process keeps
// the original budget; after a cancel it opens a fresh window instead.
func ExampleWatchdog_Resume() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore() // shared by both "processes"
	policy := watchdog.Policy{WallClock: 10 * time.Second}

	first := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, _ = first.Start(ctx, "cli-todo", mock.Now(), policy)
	mock.Add(4 * time.Second)
	_ = first.Close(ctx) // the process restarts

	second := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer second.Close(ctx)
	s, _ := second.Resume(ctx, "cli-todo", policy)
	fmt.Println("window", s.Window(), "deadline", s.Deadline().Format(time.TimeOnly))

	_ = watchdogtest.Advance(ctx, mock, 7*time.Second, second)
	fmt.Println(s.Context().Err() != nil, s.Stop())

	s, _ = second.Resume(ctx, "cli-todo", policy)
	fmt.Println("window", s.Window(), "deadline", s.Deadline().Format(time.TimeOnly))
	// Output:
	// window 1 deadline 09:00:10
	// true watchdog: session "cli-todo" window 1: wall_clock_exceeded: elapsed 10.000000001s > budget 10s
	// window 2 deadline 09:00:21
}

// RecordCheckpoint lets a worker that runs apart from its supervisor record
// its evidence, so that the supervisor that resumes the window after a
// restart continues the idle rule from the worker's last output instead of
// starting it again.
func ExampleRecordCheckpoint() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	policy := watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}

	first := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, _ = first.Start(ctx, "agent", mock.Now(), policy)
	_ = first.Close(ctx) // the supervisor goes away
	mock.Add(20 * time.Second)

	// The worker, elsewhere: its last output is now, at 09:00:20.
	lastOutput := mock.Now()
	err := watchdog.RecordCheckpoint(ctx, store, watchdog.Checkpoint{
		SessionID: "agent",
		Evidence:  []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &lastOutput, Counter: 12}},
	})
	fmt.Println("checkpoint:", err)

	second := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer second.Close(ctx)
	s, _ := second.Resume(ctx, "agent", policy)
	_ = watchdogtest.Advance(ctx, mock, time.Minute, second)
	var v *watchdog.VerdictError
	if errors.As(context.Cause(s.Context()), &v) {
		fmt.Println(v.Rule, "at", v.FiredAt.Format(time.TimeOnly), "(30 s after the worker's last output)")
	}
	// Output:
	// checkpoint: <nil>
	// idle at 09:00:50 (30 s after the worker's last output)
}

// Follow lets a component that did not start the watch exit cleanly when the
// watchdog cancels the session (cooperative cancellation through the store).
func ExampleFollow() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(ctx)
	_, _ = w.Start(ctx, "cli-todo", mock.Now(), watchdog.Policy{WallClock: time.Minute})
	_ = w.Check(ctx)

	// Elsewhere, in a component that only knows the session id:
	fctx, stop, err := watchdog.Follow(ctx, store, "cli-todo", watchdog.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer stop()

	_ = watchdogtest.Advance(ctx, mock, 2*time.Minute, w)
	<-fctx.Done()
	fmt.Println(errors.Is(context.Cause(fctx), watchdog.ErrWallClockExceeded))
	// Output:
	// true
}

// Stats gives the numbers an operator alerts on: here, one session watched
// and one record waiting for a store that is down.
func ExampleWatchdog_Stats() {
	w := watchdog.New(watchdog.WithStore(downStore{}))
	defer w.Close(context.Background())
	_, _ = w.Start(context.Background(), "agent-7", time.Now(), watchdog.Policy{})
	_ = w.Check(context.Background()) // the start's append was tried
	st := w.Stats()
	fmt.Println("sessions:", st.Sessions, "queued:", st.Queued, "panics:", st.Panics)
	// Output: sessions: 1 queued: 1 panics: 0
}

// downStore is a store that is down.
type downStore struct{}

func (downStore) Append(context.Context, ...watchdog.Event) error {
	return errors.New("connection refused")
}
func (downStore) Load(context.Context, string) ([]watchdog.Event, error) { return nil, nil }
