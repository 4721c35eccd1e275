package watchdog_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// With WithCallRecords, each tool call that returns is recorded with how
// long it ran, its cap, its last progress and how it ended, up to the
// bound per window; without it, none is.
func TestCallRecordsAreOptInAndBoundedPerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithCallRecords(3))
		s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		sc := s.Context()
		require.NoError(t, callWith(sc, "read_file", watchdog.CallLimits{Cap: 10 * time.Second}, func(ctx context.Context) error {
			time.Sleep(2 * time.Second)
			watchdog.Progress(ctx, 4)
			return nil
		}))
		boom := errors.New("exit status 2")
		require.ErrorIs(t, watchdog.Call(sc, "bash", 10*time.Second, func(ctx context.Context) error { return boom }), boom)
		err = callWith(sc, "web_search", watchdog.CallLimits{Cap: time.Second}, func(ctx context.Context) error {
			<-ctx.Done()
			return context.Cause(ctx)
		})
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		require.NoError(t, watchdog.Call(sc, "fourth", time.Second, func(ctx context.Context) error { return nil }))
		require.NoError(t, w.Check(ctx))

		var done []watchdog.Event
		for _, e := range load(t, store, "agent") {
			if e.Kind == watchdog.KindCallCompleted {
				done = append(done, e)
			}
		}
		require.Len(t, done, 3, "the bound: the fourth call is not recorded")
		assert.Equal(t, "read_file", done[0].Handler)
		assert.Equal(t, "ok", done[0].Reason)
		assert.Equal(t, 2.0, done[0].MeasureSeconds)
		assert.Equal(t, 10.0, done[0].LimitSeconds)
		assert.Equal(t, uint64(4), done[0].ProgressValue)
		assert.Equal(t, "bash", done[1].Handler)
		assert.Equal(t, "error", done[1].Reason)
		assert.Equal(t, "exit status 2", done[1].Error)
		assert.Equal(t, "web_search", done[2].Handler)
		assert.Equal(t, "handler_deadline_exceeded", done[2].Reason)
		require.NoError(t, w.Close(ctx))

		store2 := watchdog.NewMemoryStore()
		w2 := watchdog.New(watchdog.WithStore(store2))
		s2, err := w2.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		require.NoError(t, watchdog.Call(s2.Context(), "read_file", time.Second, func(ctx context.Context) error { return nil }))
		require.NoError(t, w2.Check(ctx))
		for _, e := range load(t, store2, "agent") {
			assert.NotEqual(t, watchdog.KindCallCompleted, e.Kind, "off by default")
		}
		require.NoError(t, w2.Close(ctx))
	})
}
