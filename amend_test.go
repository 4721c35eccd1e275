package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Amend changes a live session's budget only by ending its window and
// opening the next under the new policy: the old context ends, no deadline
// of a live context moves, and the log says who amended it and why; replay
// re-derives the new window's verdict under the amended policy.
func TestAmendEndsTheWindowAndOpensTheNextUnderTheNewPolicyOnRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s1, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		amendedAt := time.Now()
		s2, err := s1.Amend(context.Background(), watchdog.Policy{WallClock: 10 * time.Second}, "alice@ops", "the task needs less time")
		require.NoError(t, err)
		require.ErrorIs(t, context.Cause(s1.Context()), watchdog.ErrSessionStopped)
		assert.Equal(t, 2, s2.Window())
		assert.True(t, amendedAt.Add(10*time.Second).Equal(s2.Deadline()), "the new window's budget, from the amend: %v", s2.Deadline())
		<-s2.Context().Done()
		require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrWallClockExceeded)
		synctest.Wait()

		evs := load(t, store, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		assert.Equal(t, watchdog.StopAmended, evs[1].Reason)
		assert.Equal(t, "alice@ops", evs[2].By)
		assert.Equal(t, "the task needs less time", evs[2].Why)
		assert.Equal(t, 10*time.Second, evs[2].Policy.WallClock)
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mm)
		require.NoError(t, w.Close(context.Background()))
	})
}

// Bad input changes nothing: the window goes on under its policy. An amend
// of a window that already ended says so.
func TestAmendRefusesBadInputAndAnEndedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		_, err = s.Amend(context.Background(), watchdog.Policy{WallClock: -time.Second}, "alice", "why")
		require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
		_, err = s.Amend(context.Background(), watchdog.Policy{}, "", "why")
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		_, err = s.Amend(nil, watchdog.Policy{}, "alice", "why") //nolint:staticcheck // a nil context is refused
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		require.NoError(t, s.Context().Err(), "the window goes on")
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store, "agent")))

		require.NoError(t, s.Stop())
		_, err = s.Amend(context.Background(), watchdog.Policy{}, "alice", "why")
		require.ErrorIs(t, err, watchdog.ErrSessionStopped)
		require.NoError(t, w.Close(context.Background()))
	})
}
