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

// A post-mortem reader sees which tool calls were running at every
// verdict: the idle rule's deferral names the call it waited for, and the
// wall-clock decision names the call it killed, with its start, limits and
// last progress.
func TestVerdictsListTheCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		t0 := time.Now()
		s, err := w.Start(ctx, "agent", t0, watchdog.Policy{WallClock: 10 * time.Second, IdleWindow: 2 * time.Second})
		require.NoError(t, err)
		go func() {
			_ = callWith(s.Context(), "web_search", watchdog.CallLimits{Cap: time.Minute, Idle: 30 * time.Second}, func(ctx context.Context) error {
				time.Sleep(time.Second)
				watchdog.Progress(ctx, 5)
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
		<-s.Context().Done()
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
		synctest.Wait()

		var deferred, decision *watchdog.Event
		for _, e := range load(t, store, "agent") {
			switch {
			case e.Kind == watchdog.KindVerdict && e.Rule == "idle" && deferred == nil:
				deferred = &e
			case e.Kind == watchdog.KindDecision:
				decision = &e
			}
		}
		require.NotNil(t, deferred, "the idle rule deferred to the call")
		require.NotNil(t, decision)
		for _, e := range []*watchdog.Event{deferred, decision} {
			require.Len(t, e.CallsInFlight, 1, "%s", e.Kind)
			c := e.CallsInFlight[0]
			assert.Equal(t, "web_search", c.Name)
			assert.Equal(t, watchdog.LayerHandler, c.Layer)
			assert.True(t, c.StartedAt.Equal(t0), "started at %v", c.StartedAt)
			assert.Equal(t, 60.0, c.BudgetSeconds)
			assert.Equal(t, 30.0, c.IdleSeconds)
		}
		c := decision.CallsInFlight[0]
		assert.Equal(t, uint64(5), c.Progress)
		assert.True(t, c.ProgressAt.Equal(t0.Add(time.Second)), "progress at %v", c.ProgressAt)
		mm, err := watchdog.Replay(load(t, store, "agent"))
		require.NoError(t, err)
		assert.Empty(t, mm)
		require.NoError(t, w.Close(ctx))
	})
}

// A session with no call running records no calls_in_flight.
func TestVerdictsWithoutCallsRecordNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-s.Context().Done()
		synctest.Wait()
		for _, e := range load(t, store, "agent") {
			assert.Nil(t, e.CallsInFlight, "%s", e.Kind)
		}
		require.NoError(t, w.Close(ctx))
	})
}
