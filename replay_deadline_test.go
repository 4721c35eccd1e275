package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// deadlineLog runs, on a mock clock, a call under l whose function reports
// the progress values of steps (one per 100 ms) and then stays silent
// until its context ends; it returns the session's log and the index of its
// deadline record.
func deadlineLog(t *testing.T, l watchdog.CallLimits, steps int) ([]watchdog.Event, int) {
	t.Helper()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	report, res := progressingCallWith(t, s.Context(), l)
	for i := 1; i <= steps; i++ {
		advance(t, mock, 100*time.Millisecond, w)
		require.True(t, report(uint64(i)))
	}
	for done := false; !done; {
		advance(t, mock, 10*time.Millisecond, w)
		select {
		case err := <-res:
			require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
			done = true
		default:
		}
	}
	evs := load(t, store, "s")
	for i, e := range evs {
		if e.Kind == watchdog.KindHandlerDeadline {
			return evs, i
		}
	}
	t.Fatal("no deadline record")
	return nil, 0
}

// replayed is Replay's mismatches for evs, which it must read.
func replayed(t *testing.T, evs []watchdog.Event) []watchdog.Mismatch {
	t.Helper()
	mm, err := watchdog.Replay(evs)
	require.NoError(t, err)
	return mm
}

// tampered is a copy of evs whose event i (and its call) f changed.
func tampered(evs []watchdog.Event, i int, f func(e *watchdog.Event, c *watchdog.CallInFlight)) []watchdog.Event {
	out := append([]watchdog.Event(nil), evs...)
	e := &out[i]
	e.CallsInFlight = append([]watchdog.CallInFlight(nil), e.CallsInFlight...)
	var c *watchdog.CallInFlight
	if len(e.CallsInFlight) > 0 {
		c = &e.CallsInFlight[0]
	}
	f(e, c)
	return out
}

// A call's deadline record carries the call that died, with its start, all
// its limits and its last progress; Replay re-derives from it the idle
// fire, the cap fire and the first-progress fire of real CallWith runs.
func TestReplayRederivesTheIdleCapAndFirstProgressFiresOfRealCalls(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limits     watchdog.CallLimits
		steps      int
		rule       string
		at         time.Duration // from the start
		limit      float64
		progressAt time.Duration // 0: none
	}{
		{"idle after progress", watchdog.CallLimits{Cap: time.Minute, Idle: 500 * time.Millisecond}, 3, "handler_idle", 800 * time.Millisecond, 0.5, 300 * time.Millisecond},
		{"cap with advancing progress", watchdog.CallLimits{Cap: 2 * time.Second, Idle: 500 * time.Millisecond}, 19, "handler_deadline", 2 * time.Second, 2, 1900 * time.Millisecond},
		{"first progress never came", watchdog.CallLimits{Cap: time.Minute, Idle: 100 * time.Millisecond, FirstProgress: 3 * time.Second}, 0, "handler_idle", 3 * time.Second, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, i := deadlineLog(t, tc.limits, tc.steps)
			e := evs[i]
			assert.Equal(t, tc.rule, e.Rule)
			assert.Equal(t, t0.Add(tc.at), e.OccurredAt)
			assert.InDelta(t, tc.limit, e.LimitSeconds, 1e-9)
			require.Len(t, e.CallsInFlight, 1, "the call that died")
			c := e.CallsInFlight[0]
			assert.Equal(t, "build", c.Name)
			assert.Equal(t, watchdog.LayerHandler, c.Layer)
			assert.Equal(t, t0, c.StartedAt)
			assert.Equal(t, tc.limits.Cap.Seconds(), c.BudgetSeconds)
			assert.Equal(t, tc.limits.Idle.Seconds(), c.IdleSeconds)
			assert.Equal(t, tc.limits.FirstProgress.Seconds(), c.FirstProgressSeconds)
			assert.Equal(t, e.ProgressValue, c.Progress)
			assert.Equal(t, e.ProgressAt, c.ProgressAt)
			if tc.progressAt > 0 {
				assert.Equal(t, t0.Add(tc.progressAt), c.ProgressAt)
			} else {
				assert.True(t, c.ProgressAt.IsZero())
			}
			assert.Empty(t, replayed(t, evs))
		})
	}
}

// In a session on the real clock (a synctest bubble), a call's progress is
// dated exactly: progress at 700 ms and 730 ms ends an idle limit of 1 s at
// 1,730 ms, not earlier, and its record holds the instant the verdict used,
// from which Replay re-derives the fire exactly.
func TestACallInASessionEndsExactlyItsIdleLimitAfterTheLastProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		begin := time.Now()
		s, err := w.Start(ctx, "s", begin, watchdog.Policy{})
		require.NoError(t, err)
		err = callWith(s.Context(), "llm", watchdog.CallLimits{Cap: time.Minute, Idle: time.Second}, func(ctx context.Context) error {
			time.Sleep(700 * time.Millisecond)
			watchdog.Progress(ctx, 1)
			time.Sleep(30 * time.Millisecond)
			watchdog.Progress(ctx, 2)
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		assert.Equal(t, 1730*time.Millisecond, time.Since(begin), "the idle limit after the last progress, exactly")
		s.Stop()
		require.NoError(t, w.Close(ctx))

		evs := load(t, store, "s")
		d := ofKind(evs, watchdog.KindHandlerDeadline)
		require.Len(t, d, 1)
		require.Len(t, d[0].CallsInFlight, 1)
		c := d[0].CallsInFlight[0]
		assert.Equal(t, "handler_idle", d[0].Rule)
		assert.Equal(t, uint64(2), c.Progress)
		assert.True(t, c.ProgressAt.Equal(begin.Add(730*time.Millisecond)), "progress instant %v after the start", c.ProgressAt.Sub(begin))
		assert.True(t, d[0].OccurredAt.Equal(c.ProgressAt.Add(time.Second)), "the idle limit from the recorded instant")
		assert.Empty(t, replayed(t, evs))
	})
}

// A Within layer that is not a call (a phase) carries itself on its
// deadline record too, and Replay re-derives its cap.
func TestReplayRederivesAPhaseDeadlineFromTheLayerItCarries(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	res := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		res <- watchdog.Within(s.Context(), watchdog.LayerPhase, "plan", 2*time.Second, func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 2*time.Second, w)
	require.ErrorIs(t, testwait.For(t, res, "the call's result"), watchdog.ErrDeadlineExceeded)
	evs := load(t, store, "s")
	d := ofKind(evs, watchdog.KindHandlerDeadline)
	require.Len(t, d, 1)
	assert.Equal(t, "phase_deadline", d[0].Rule)
	require.Len(t, d[0].CallsInFlight, 1)
	assert.Equal(t, watchdog.LayerPhase, d[0].CallsInFlight[0].Layer)
	assert.Empty(t, replayed(t, evs))
}

// A deadline record whose rule, limits or instant were changed is reported
// by Replay, with the rule the call's limits give.
func TestReplayReportsATamperedDeadlineRecordNamingTheRuleItsLimitsGive(t *testing.T) {
	idle, i := deadlineLog(t, watchdog.CallLimits{Cap: time.Minute, Idle: 500 * time.Millisecond}, 3) // idle at 800 ms
	cap, j := deadlineLog(t, watchdog.CallLimits{Cap: 2 * time.Second, Idle: 500 * time.Millisecond}, 19)
	require.Empty(t, replayed(t, idle))
	require.Empty(t, replayed(t, cap))
	for _, tc := range []struct {
		name   string
		log    []watchdog.Event
		derive string // in the mismatch's Derived
	}{
		{"an idle fire recorded as the cap", tampered(idle, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.Rule, e.Reason = "handler_deadline", "handler_deadline_exceeded"
		}), "rule=handler_idle measure=0.500000000 limit=0.500000000"},
		{"a cap fire recorded as idle", tampered(cap, j, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.Rule, e.Reason = "handler_idle", "handler_idle_exceeded"
		}), "rule=handler_deadline measure=2.000000000 limit=2.000000000"},
		{"a cap short enough to have fired first", tampered(idle, i, func(_ *watchdog.Event, c *watchdog.CallInFlight) {
			c.BudgetSeconds = 0.7
		}), "rule=handler_deadline measure=0.800000000 limit=0.700000000"},
		{"an idle fire moved before its due instant", tampered(idle, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.OccurredAt = e.OccurredAt.Add(-time.Nanosecond)
		}), "handler_idle not before " + t0.Add(800*time.Millisecond).Format(time.RFC3339Nano)},
		{"a cap fire moved before its due instant", tampered(cap, j, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.OccurredAt = e.OccurredAt.Add(-time.Millisecond)
		}), "handler_deadline not before " + t0.Add(2*time.Second).Format(time.RFC3339Nano)},
		{"a longer idle limit than the one that fired", tampered(idle, i, func(_ *watchdog.Event, c *watchdog.CallInFlight) {
			c.IdleSeconds = 0.6
		}), "handler_idle not before " + t0.Add(900*time.Millisecond).Format(time.RFC3339Nano)},
		{"a measure that is not the time without progress", tampered(idle, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.MeasureSeconds = 0.8
		}), "rule=handler_idle measure=0.500000000"},
		{"a progress instant the call does not carry", tampered(idle, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) {
			e.ProgressAt = e.ProgressAt.Add(100 * time.Millisecond)
		}), "progress=3 at " + t0.Add(300*time.Millisecond).Format(time.RFC3339Nano)},
		{"limits that are not limits", tampered(idle, i, func(_ *watchdog.Event, c *watchdog.CallInFlight) {
			c.IdleSeconds = -1
		}), "valid limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mm := replayed(t, tc.log)
			require.Len(t, mm, 1)
			assert.Equal(t, watchdog.KindHandlerDeadline, mm[0].Event.Kind)
			assert.Contains(t, mm[0].Derived, tc.derive)
		})
	}
}

// A deadline record of an earlier version, without its call, still gets
// the checks it had: due under its recorded limit, and for an idle fire
// since its last progress.
func TestReplayChecksAnOlderDeadlineRecordWithoutItsCallAsBefore(t *testing.T) {
	evs, i := deadlineLog(t, watchdog.CallLimits{Cap: time.Minute, Idle: 500 * time.Millisecond}, 3)
	old := tampered(evs, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) { e.CallsInFlight = nil })
	assert.Empty(t, replayed(t, old), "an older record passes")
	// Its rule alone cannot be re-derived: changed, it still passes.
	assert.Empty(t, replayed(t, tampered(old, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) { e.Rule = "handler_deadline" })))
	mm := replayed(t, tampered(old, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) { e.MeasureSeconds = 0.4 }))
	require.Len(t, mm, 1)
	assert.Contains(t, mm[0].Derived, "not due before 0.500000000s")
	mm = replayed(t, tampered(old, i, func(e *watchdog.Event, _ *watchdog.CallInFlight) { e.ProgressAt = e.ProgressAt.Add(time.Millisecond) }))
	require.Len(t, mm, 1)
	assert.Contains(t, mm[0].Derived, "without progress")
}

// A verdict lists a call in flight with its first-progress limit too, so
// that a post-mortem reader sees every limit the call ran under.
func TestVerdictsListACallsFirstProgressLimit(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 2 * time.Second})
	require.NoError(t, err)
	_, res := progressingCallWith(t, s.Context(), watchdog.CallLimits{Cap: time.Minute, Idle: time.Second, FirstProgress: 30 * time.Second})
	advance(t, mock, 2*time.Second+time.Millisecond, w) // the wall clock is over after 2 s
	require.Error(t, testwait.For(t, res, "the call's result"))
	d := ofKind(load(t, store, "s"), watchdog.KindDecision)
	require.Len(t, d, 1)
	require.Len(t, d[0].CallsInFlight, 1)
	c := d[0].CallsInFlight[0]
	assert.Equal(t, 60.0, c.BudgetSeconds)
	assert.Equal(t, 1.0, c.IdleSeconds)
	assert.Equal(t, 30.0, c.FirstProgressSeconds)
}
