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
