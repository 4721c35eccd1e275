package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// A pipeline loop with a 10 s budget (the README's cli-todo example) fires
// just past 10 s, records exactly one cancel with every field, and the
// result envelope carries stop_reason_code=watchdog_wall_clock_exceeded.
func TestCliTodoLoopIsCancelledJustPastItsTenSecondBudget(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)

	started := make(chan context.Context, 1)
	type outcome struct {
		res watchdog.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := w.Run(context.Background(), "cli-todo", watchdog.Policy{WallClock: 10 * time.Second},
			func(ctx context.Context) error {
				started <- ctx
				<-ctx.Done() // the loop: iterate until the watchdog says stop
				return context.Cause(ctx)
			})
		done <- outcome{res, err}
	}()
	ctx := testwait.For(t, started, "Run to start the function")

	advance(t, mock, 10*time.Second, w)
	require.NoError(t, ctx.Err(), "exactly at the budget the loop must still run")

	advance(t, mock, time.Nanosecond, w)
	require.Error(t, ctx.Err(), "one nanosecond past the budget the loop must be cancelled")
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, watchdog.ErrWallClockExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.Equal(t, "cli-todo", v.SessionID)
	assert.Equal(t, "watchdog_wall_clock_exceeded", v.StopReasonCode())
	assert.Equal(t, 10*time.Second+time.Nanosecond, v.Elapsed)
	assert.Equal(t, 10*time.Second, v.Budget)

	out := testwait.For(t, done, "Run to return")
	require.ErrorIs(t, out.err, watchdog.ErrWallClockExceeded)
	assert.Equal(t, watchdog.Result{
		SessionID: "cli-todo", StopReasonCode: "watchdog_wall_clock_exceeded",
		Resumable: true, Window: 1, Elapsed: 10*time.Second + time.Nanosecond,
	}, out.res)
	j, err := json.Marshal(out.res)
	require.NoError(t, err)
	assert.JSONEq(t, `{"session_id":"cli-todo","stop_reason_code":"watchdog_wall_clock_exceeded","resumable":true,"window":1,"elapsed_seconds":10.000000001}`, string(j))

	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "cli-todo")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	d, c := evs[1], evs[2]
	assert.Equal(t, "HARD_STOP", jsonField(t, d, "verdict"))
	assert.Equal(t, watchdog.ModeAct, d.Mode)
	assert.Equal(t, "wall_clock", d.Rule)
	assert.Equal(t, d.ID, c.DecidedByDecisionID, "the outcome links its decision")
	require.NotNil(t, c.Recoverable)
	assert.False(t, *c.Recoverable, "the wall clock is never retried by a recovery layer")
	assert.Equal(t, "runtime_control", jsonField(t, c, "aggregate_type"))
	assert.Equal(t, "cli-todo", c.AggregateID)
	assert.Equal(t, "runtime.watchdog.cancel", c.Kind)
	assert.Equal(t, "wall_clock_exceeded", c.Reason)
	assert.Equal(t, "watchdog_wall_clock_exceeded", jsonField(t, c, "stop_reason_code"))
	assert.Equal(t, 1, c.Window)
	assert.Equal(t, t0, c.SessionStartedAt)
	assert.Equal(t, t0, c.WindowStartedAt)
	assert.Equal(t, t0.Add(10*time.Second+time.Nanosecond), c.FiredAt)
	assert.Equal(t, c.FiredAt, c.OccurredAt)
	assert.InDelta(t, 10.000000001, c.ElapsedSeconds, 1e-12)
	assert.Equal(t, 10.0, c.ConfiguredBudgetSeconds)
	assert.NotEmpty(t, c.ID)
	assert.NotEqual(t, evs[0].ID, c.ID)
	assert.Less(t, d.Seq, c.Seq, "the decision is recorded before the outcome")

	var wire map[string]any
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &wire))
	assert.Equal(t, "2026-05-23T09:00:00Z", wire["session_started_at"])
	assert.Equal(t, "2026-05-23T09:00:10.000000001Z", wire["fired_at"])
	for _, k := range []string{"event_id", "aggregate_type", "aggregate_id", "event_kind", "reason", "window",
		"session_started_at", "window_started_at", "occurred_at", "fired_at", "elapsed_seconds",
		"configured_budget_seconds", "stop_reason_code", "seq"} {
		assert.Contains(t, wire, k)
	}
}

func TestZeroWallClockMeansTheFourHourDefault(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", mock.Now(), watchdog.Policy{})
	require.NoError(t, err)
	assert.Equal(t, 4*time.Hour, s.Deadline().Sub(s.Snapshot().WindowStartedAt))
	advance(t, mock, 4*time.Hour, w)
	require.NoError(t, s.Context().Err())
	advance(t, mock, time.Nanosecond, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
}

func TestStopRecordsTerminalEventAndNothingFiresAfterIt(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", mock.Now(), watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	advance(t, mock, 500*time.Millisecond, w)
	require.NoError(t, s.Stop())
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrSessionStopped)
	require.NoError(t, s.Stop(), "a second Stop is a no-op")
	advance(t, mock, time.Hour, w)
	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds(evs))
	assert.Equal(t, "completed", jsonField(t, evs[1], "stop_reason_code"))
	assert.InDelta(t, 0.5, evs[1].ElapsedSeconds, 1e-9)
}

func TestStopAfterTheFireReturnsTheVerdict(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", mock.Now(), watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	advance(t, mock, 2*time.Second, w)
	err = s.Stop()
	require.ErrorIs(t, err, watchdog.ErrWallClockExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, 1, v.Window)
}

// A session whose start lies far in the past fires at the first settle.
func TestStartAlreadyPastItsBudgetFiresAtOnce(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "old", t0.Add(-time.Hour), watchdog.Policy{WallClock: time.Minute})
	require.NoError(t, err)
	require.NoError(t, w.Check(context.Background()))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
	assert.Equal(t, 1, countKind(load(t, store, "old"), watchdog.KindCancel))
}

func TestResumeBeforeTheFireKeepsTheOriginalStartAcrossARestart(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	p := watchdog.Policy{WallClock: 10 * time.Second}

	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err := w1.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 4*time.Second, w1)
	require.NoError(t, w1.Close(context.Background())) // the process goes away

	w2 := newWatchdog(t, mock, store) // a brand-new Watchdog sharing the store
	s, err := w2.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	assert.Equal(t, t0, s.StartedAt())
	assert.Equal(t, t0, s.Snapshot().WindowStartedAt)
	assert.Equal(t, 1, s.Window())
	assert.Equal(t, t0.Add(10*time.Second), s.Deadline())

	advance(t, mock, 6*time.Second, w2)
	require.NoError(t, s.Context().Err())
	advance(t, mock, time.Nanosecond, w2)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.Equal(t, t0.Add(10*time.Second+time.Nanosecond), evs[3].FiredAt)
	assert.Equal(t, 1, evs[3].Window)
}

func TestResumeAfterTheCancelOpensAFreshWindowAtTheResumeMoment(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	p := watchdog.Policy{WallClock: 10 * time.Second}

	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s1, err := w1.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 10*time.Second+time.Nanosecond, w1)
	require.ErrorIs(t, context.Cause(s1.Context()), watchdog.ErrWallClockExceeded)
	require.NoError(t, w1.Close(context.Background()))

	mock.Add(5 * time.Second) // the operator resumes a little later
	resumeAt := mock.Now()
	w2 := newWatchdog(t, mock, store)
	s2, err := w2.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	assert.Equal(t, 2, s2.Window())
	assert.Equal(t, t0, s2.StartedAt(), "session_started_at never changes")
	assert.Equal(t, resumeAt, s2.Snapshot().WindowStartedAt)

	advance(t, mock, 10*time.Second, w2)
	require.NoError(t, s2.Context().Err())
	advance(t, mock, time.Nanosecond, w2)
	require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrWallClockExceeded)

	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.Equal(t, 2, evs[5].Window)
	assert.Equal(t, resumeAt.Add(10*time.Second+time.Nanosecond), evs[5].FiredAt)
	assert.Equal(t, t0, evs[5].SessionStartedAt)
	assert.Equal(t, resumeAt, evs[5].WindowStartedAt)
}

// An open window keeps the policy it was opened with: a supervisor that
// resumes it with another policy does not change its running budget (the
// log then replays clean), and the policy passed applies from the next
// window.
func TestResumeContinuesAnOpenWindowUnderItsRecordedPolicy(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	opened := watchdog.Policy{WallClock: 10 * time.Second}
	other := watchdog.Policy{WallClock: time.Hour, SettleChecks: 5}

	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err := w1.Start(context.Background(), "s", t0, opened)
	require.NoError(t, err)
	advance(t, mock, 4*time.Second, w1)
	require.NoError(t, w1.Close(context.Background()))

	w2 := newWatchdog(t, mock, store)
	s, err := w2.Resume(context.Background(), "s", other)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(10*time.Second), s.Deadline(), "the open window's recorded budget")
	advance(t, mock, 6*time.Second+time.Nanosecond, w2)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

	s2, err := w2.Resume(context.Background(), "s", other)
	require.NoError(t, err)
	assert.Equal(t, 2, s2.Window())
	assert.Equal(t, s2.Snapshot().WindowStartedAt.Add(time.Hour), s2.Deadline(), "a new window takes the policy passed")
	require.NoError(t, s2.Stop())
	require.NoError(t, w2.Close(context.Background()))

	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel, watchdog.KindResume, watchdog.KindStop}, kinds(evs))
	assert.Equal(t, opened, *evs[1].Policy, "the resume records the policy in effect")
	assert.Equal(t, other, *evs[4].Policy)
	ms, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, ms)
}

// A cancel that this Watchdog has not managed to record yet still counts:
// resuming in the same process opens the next window instead of firing again.
func TestResumeSeesThisWatchdogsUnrecordedCancel(t *testing.T) {
	mock := newMock()
	store := newFaultyStore(0)
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Second}
	_, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	require.NoError(t, w.Check(context.Background())) // start recorded
	store.setFail(1000)
	advance(t, mock, 2*time.Second, w) // cancel fired, not recorded
	assert.Equal(t, 0, countKind(load(t, store, "s"), watchdog.KindCancel))

	s2, err := w.Resume(context.Background(), "s", watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, 2, s2.Window())
	require.NoError(t, w.Check(context.Background()))
	require.NoError(t, s2.Context().Err())

	store.setFail(0)
	advance(t, mock, 30*time.Second, w)
	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel, watchdog.KindResume}, kinds(evs))
}

func TestResumeOfAnUnknownSessionFails(t *testing.T) {
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	_, err := w.Resume(context.Background(), "nobody", watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrUnknownSession)
	// the id is free again
	_, err = w.Start(context.Background(), "nobody", t0, watchdog.Policy{})
	require.NoError(t, err)
}

func TestTenThousandSessionsDueAtTheSameInstantAllFireExactlyOnce(t *testing.T) {
	const n = 10000
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	sessions := make([]*watchdog.Session, n)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				s, err := w.Start(context.Background(), fmt.Sprintf("s-%05d", i), t0, watchdog.Policy{WallClock: time.Minute})
				if err != nil {
					panic(err)
				}
				sessions[i] = s
			}
		}(g)
	}
	wg.Wait() // the goroutines start 10,000 sessions: work, not a wait on the library
	advance(t, mock, time.Minute+time.Nanosecond, w)
	cancels := 0
	for i, s := range sessions {
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded, "session %d", i)
		evs := load(t, store, s.ID())
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs), "session %d", i)
		assert.Equal(t, t0.Add(time.Minute+time.Nanosecond), evs[2].FiredAt)
		cancels++
	}
	assert.Equal(t, n, cancels)
}

// Whatever wins the race between Stop and the fire, each window gets exactly
// one terminal event, and Stop's result agrees with it.
func TestConcurrentStopAndFireRecordExactlyOneTerminalEvent(t *testing.T) {
	const n = 500
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	sessions := make([]*watchdog.Session, n)
	for i := range sessions {
		s, err := w.Start(context.Background(), fmt.Sprintf("s-%d", i), t0, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		sessions[i] = s
	}
	stopErrs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, s := range sessions {
			stopErrs[i] = s.Stop()
		}
	}()
	mock.Add(2 * time.Second)
	require.NoError(t, w.Check(context.Background()))
	testwait.Group(t, &wg, "the goroutines")
	require.NoError(t, w.Check(context.Background()))
	for i, s := range sessions {
		evs := load(t, store, s.ID())
		terminal := evs[len(evs)-1]
		require.Equal(t, 1, countKind(evs, watchdog.KindStop)+countKind(evs, watchdog.KindCancel), "session %d: %v", i, kinds(evs))
		switch terminal.Kind {
		case watchdog.KindStop:
			require.NoError(t, stopErrs[i])
		case watchdog.KindCancel:
			require.ErrorIs(t, stopErrs[i], watchdog.ErrWallClockExceeded)
		default:
			t.Fatalf("session %d: terminal kind %q", i, terminal.Kind)
		}
	}
}

func TestDuplicateStartIsRefusedAndRecordsNothing(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	_, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	_, err = w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Second})
	require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
	_, err = w.Resume(context.Background(), "s", watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
	advance(t, mock, 2*time.Second, w)
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store, "s")))
}

// Two Watchdogs resuming the same session from one store both fire; the store
// records one cancel, and the loser neither records nor acts twice.
func TestTwoWatchdogsResumingOneSessionRecordOneCancel(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	p := watchdog.Policy{WallClock: 10 * time.Second}
	w0 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err := w0.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	require.NoError(t, w0.Close(context.Background()))

	wa, wb := newWatchdog(t, mock, store), newWatchdog(t, mock, store)
	sa, err := wa.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	sb, err := wb.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	require.Equal(t, sa.Window(), sb.Window())

	advance(t, mock, 11*time.Second, wa, wb)
	require.ErrorIs(t, context.Cause(sa.Context()), watchdog.ErrWallClockExceeded)
	require.ErrorIs(t, context.Cause(sb.Context()), watchdog.ErrWallClockExceeded)
	require.NoError(t, wa.Close(context.Background()), "losing the race is not an error")
	require.NoError(t, wb.Close(context.Background()))
	evs := load(t, store, "s")
	assert.Equal(t, 1, countKind(evs, watchdog.KindCancel), "%v", kinds(evs))
}

// A store that fails its first Appends: the cancel still happens on time, and
// the event is recorded exactly once afterwards.
func TestFailingStoreCancelsOnTimeAndRecordsTheEventOnceLater(t *testing.T) {
	mock := newMock()
	store := newFaultyStore(5)
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)

	advance(t, mock, 10*time.Second+time.Nanosecond, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded, "fail closed: cancel on time")

	for i := 0; i < 10; i++ { // backoff runs on the mock clock
		advance(t, mock, 30*time.Second, w)
	}
	evs := load(t, store, "s")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.Equal(t, t0.Add(10*time.Second+time.Nanosecond), evs[2].FiredAt, "the record keeps the fire instant")
	assert.Equal(t, 5, store.fails)
}

// A store whose Append hangs delays records, never verdicts.
func TestSlowStoreDoesNotDelayOtherSessionsCancels(t *testing.T) {
	mock := newMock()
	store := newFaultyStore(0)
	gate := make(chan struct{})
	store.gate, store.entered = gate, make(chan struct{}, 1)
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	a, err := w.Start(context.Background(), "a", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	testwait.For(t, store.entered, "the recorder to enter the store's Append") // the recorder is stuck in Append for a's start event
	b, err := w.Start(context.Background(), "b", t0, watchdog.Policy{WallClock: 2 * time.Second})
	require.NoError(t, err)

	mock.Add(3 * time.Second)
	// Check's scheduler pass decides whatever the mock's timer callbacks
	// left due (a pass may re-arm its timer after Add moved past it); Check
	// itself then waits for the stuck store, which the cancels must not.
	checked := make(chan error, 1)
	go func() { checked <- w.Check(context.Background()) }()
	testwait.For(t, a.Context().Done(), "a's context to end")
	testwait.For(t, b.Context().Done(), "b's context to end")
	require.ErrorIs(t, context.Cause(b.Context()), watchdog.ErrWallClockExceeded)

	close(gate)
	require.NoError(t, testwait.For(t, checked, "Check to return"))
	require.NoError(t, w.Close(context.Background()))
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store, "a")))
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store, "b")))
}

// Run gives its result and its stop event the code of how the loop ended:
// completed, failed (an error, or a panic, which Run raises again) or
// canceled (the caller's context); only a completed run is not resumable.
func TestRunRecordsHowTheLoopEndedAsItsStopReasonCode(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	boom := errors.New("boom")

	res, err := w.Run(context.Background(), "ok", watchdog.Policy{}, func(context.Context) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, "completed", res.StopReasonCode)
	assert.False(t, res.Resumable)

	res, err = w.Run(context.Background(), "bad", watchdog.Policy{}, func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	assert.Equal(t, "failed", res.StopReasonCode)
	assert.True(t, res.Resumable)

	parent, cancel := context.WithCancel(context.Background())
	res, err = w.Run(parent, "cancelled", watchdog.Policy{}, func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "canceled", res.StopReasonCode)
	assert.True(t, res.Resumable)

	require.Panics(t, func() {
		_, _ = w.Run(context.Background(), "panics", watchdog.Policy{}, func(context.Context) error { panic("oops") })
	})

	require.NoError(t, w.Check(context.Background()))
	for id, code := range map[string]string{"ok": "completed", "bad": "failed", "cancelled": "canceled", "panics": "failed"} {
		evs := load(t, store, id)
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds(evs), id)
		assert.Equal(t, code, jsonField(t, evs[1], "stop_reason_code"), id)
	}
}

func TestBadInputGetsClearErrors(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	ctx := context.Background()
	var nilCtx context.Context

	_, err := w.Start(ctx, "", t0, watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "empty session id")

	_, err = w.Start(nilCtx, "s", t0, watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)

	_, err = w.Start(ctx, "s", time.Time{}, watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "session_started_at")

	_, err = w.Start(ctx, "s", t0, watchdog.Policy{WallClock: -time.Second})
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "session_wall_clock_seconds")

	_, err = w.Resume(ctx, "", watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)

	_, err = w.Run(ctx, "s", watchdog.Policy{}, nil)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)

	// The largest budget works and never overflows the scheduler.
	s, err := w.Start(ctx, "forever", t0, watchdog.Policy{WallClock: time.Duration(1<<63 - 1)})
	require.NoError(t, err)
	advance(t, mock, 100*365*24*time.Hour, w)
	require.NoError(t, s.Context().Err())

	var p watchdog.Policy
	err = json.Unmarshal([]byte(`{"session_wall_clock_seconds": 1e300}`), &p)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "session_wall_clock_seconds")
	err = json.Unmarshal([]byte(`{"session_wall_clock_secs": 10}`), &p)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "session_wall_clock_secs")
}

func TestPolicyJSONUsesTheSeedKnobNames(t *testing.T) {
	b, err := json.Marshal(watchdog.Policy{WallClock: 90 * time.Minute})
	require.NoError(t, err)
	assert.JSONEq(t, `{"session_wall_clock_seconds":5400}`, string(b))
	var p watchdog.Policy
	require.NoError(t, json.Unmarshal([]byte(`{"session_wall_clock_seconds":14400}`), &p))
	assert.Equal(t, 4*time.Hour, p.WallClock)
	require.NoError(t, json.Unmarshal([]byte(`{"session_wall_clock_seconds":0.25}`), &p))
	assert.Equal(t, 250*time.Millisecond, p.WallClock)
}

// Cooperative cancellation: a component that did not start
// the watch follows the session through the store and exits cleanly.
func TestFollowerExitsWhenTheCancelIsRecorded(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	_, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Check(context.Background()))

	fctx, stop, err := watchdog.Follow(context.Background(), store, "s", watchdog.WithClock(mock))
	require.NoError(t, err)
	defer stop()
	exited := make(chan error, 1)
	go func() { // e.g. an evolve step in another component
		<-fctx.Done()
		exited <- context.Cause(fctx)
	}()
	advance(t, mock, 2*time.Second, w)
	cause := testwait.For(t, exited, "the follower to exit")
	require.ErrorIs(t, cause, watchdog.ErrWallClockExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.Equal(t, "s", v.SessionID)
	assert.Equal(t, time.Second, v.Budget)

	// A follower that arrives after the cancel is cancelled at once.
	late, stopLate, err := watchdog.Follow(context.Background(), store, "s")
	require.NoError(t, err)
	defer stopLate()
	require.ErrorIs(t, context.Cause(late), watchdog.ErrWallClockExceeded)
}

type loadOnly struct{ watchdog.EventStore }

func TestFollowNeedsASubscriber(t *testing.T) {
	_, _, err := watchdog.Follow(context.Background(), loadOnly{watchdog.NewMemoryStore()}, "s")
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
}

func TestEventJSONKeepsUnknownFields(t *testing.T) {
	in := `{"event_id":"e1","seq":7,"aggregate_type":"runtime_control","aggregate_id":"s","event_kind":"runtime.watchdog.cancel","window":2,"reason":"wall_clock_exceeded","session_started_at":"2026-05-23T09:00:00Z","window_started_at":"2026-05-23T09:00:00Z","occurred_at":"2026-05-23T09:00:10Z","fired_at":"2026-05-23T09:00:10Z","elapsed_seconds":10,"configured_budget_seconds":10,"verdict":"HARD_STOP","stop_reason_code":"watchdog_wall_clock_exceeded","from_the_future":{"x":[1,2]},"note":"hi"}`
	var e watchdog.Event
	require.NoError(t, json.Unmarshal([]byte(in), &e))
	assert.Equal(t, "s", e.AggregateID)
	assert.Equal(t, 2, e.Window)
	assert.Len(t, e.Extra, 2)
	out, err := json.Marshal(e)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(out))
}

// The contract's fields that restate others (aggregate_type, verdict,
// stop_reason_code) are written from the fields they derive from, and what
// a log says in them is not trusted: a stop always reads as stopped for its
// reason, a cancel as a HARD_STOP.
func TestEventJSONDerivesVerdictAndStopReasonCode(t *testing.T) {
	for _, tc := range []struct {
		in                      string
		verdict, stopReasonCode any
	}{
		{`{"event_kind":"runtime.watchdog.cancel","reason":"idle_exceeded","verdict":"CONTINUE","stop_reason_code":"completed","aggregate_type":"other"}`, "HARD_STOP", "watchdog_idle_exceeded"},
		{`{"event_kind":"runtime.watchdog.stop","reason":"completed","stop_reason_code":"watchdog_idle_exceeded"}`, nil, "completed"},
		{`{"event_kind":"runtime.watchdog.verdict","rule":"idle","verdict":"HARD_STOP"}`, "CONTINUE", nil},
		{`{"event_kind":"runtime.watchdog.decision","rule":"idle","reason":"idle_exceeded"}`, "HARD_STOP", nil},
		{`{"event_kind":"runtime.watchdog.wait_timeout","reason":"wait_timeout"}`, "CONTINUE", nil},
		{`{"event_kind":"runtime.watchdog.retry","reason":"idle_exceeded"}`, nil, nil},
	} {
		var e watchdog.Event
		require.NoError(t, json.Unmarshal([]byte(tc.in), &e), tc.in)
		assert.Empty(t, e.Extra, tc.in)
		assert.Equal(t, "runtime_control", jsonField(t, e, "aggregate_type"), tc.in)
		assert.Equal(t, tc.verdict, jsonField(t, e, "verdict"), tc.in)
		assert.Equal(t, tc.stopReasonCode, jsonField(t, e, "stop_reason_code"), tc.in)
	}
}

// A log written before RunPhase's events named their phase in handler (with
// layer "phase") still decodes: its phase field becomes the handler.
func TestEventJSONReadsAnOlderLogsPhaseAsItsHandler(t *testing.T) {
	var e watchdog.Event
	require.NoError(t, json.Unmarshal([]byte(`{"event_kind":"runtime.watchdog.retry","phase":"plan","attempt":2}`), &e))
	assert.Equal(t, "plan", e.Handler)
	assert.Equal(t, "phase", e.Layer)
	assert.Empty(t, e.Extra)
	assert.Nil(t, jsonField(t, e, "phase"), "written back in handler only")
}
