package watchdogtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

func TestAdvanceFiresEverySessionAtItsExactDueInstant(t *testing.T) {
	ctx := context.Background()
	mock := clock.NewMock()
	t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	mock.Set(t0)
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(ctx)
	budgets := map[string]time.Duration{"a": time.Second, "b": 3 * time.Second, "c": 7 * time.Second}
	for id, b := range budgets {
		_, err := w.Start(ctx, id, t0, watchdog.Policy{WallClock: b})
		require.NoError(t, err)
	}
	require.NoError(t, watchdogtest.Advance(ctx, mock, time.Minute, w))
	require.Equal(t, t0.Add(time.Minute), mock.Now())
	for id, b := range budgets {
		evs, err := store.Load(ctx, id)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		require.Equal(t, t0.Add(b+time.Nanosecond), evs[2].FiredAt, id)
	}
	_, ok := w.NextDeadline()
	require.False(t, ok)
}

func TestAdvanceRefusesANegativeDuration(t *testing.T) {
	mock := clock.NewMock()
	require.Error(t, watchdogtest.Advance(context.Background(), mock, -time.Second))
}

// A liveness rule of the user's decides in ReportLiveness, and its
// configured action runs on a goroutine of its own: Advance settles at the
// current instant before it moves the clock, so the action runs and its
// outcome is recorded at the decision's instant, and two runs of the same
// test write the same log.
func TestAdvanceRunsALivenessRulesActionAtItsDecisionInstant(t *testing.T) {
	run := func() []watchdog.Event {
		ctx := context.Background()
		mock := clock.NewMock()
		t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
		mock.Set(t0)
		store := watchdog.NewMemoryStore()
		var ranAt time.Time
		w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store), watchdog.WithEventIDPrefix("run"),
			watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
				ranAt = mock.Now()
				return nil
			}))
		defer w.Close(ctx)
		s, err := w.Start(ctx, "s", t0, watchdog.Policy{WallClock: time.Hour, LivenessRules: []string{"probe"}, SettleChecks: 1})
		require.NoError(t, err)
		require.NoError(t, watchdogtest.Advance(ctx, mock, time.Second, w))
		decided, err := s.ReportLiveness("probe", true)
		require.NoError(t, err)
		require.True(t, decided)
		require.NoError(t, watchdogtest.Advance(ctx, mock, time.Minute, w))
		require.Error(t, s.Context().Err())
		require.Equal(t, t0.Add(time.Second), ranAt, "the action ran at the decision's instant")
		evs, err := store.Load(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, []string{evs[0].Kind, evs[1].Kind, evs[2].Kind})
		require.Equal(t, evs[1].OccurredAt, evs[2].OccurredAt, "the outcome is recorded at the decision's instant")
		return evs
	}
	first := run()
	for range 20 {
		require.Equal(t, first, run())
	}
}
