package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): Close(ctx) gives up waiting for an action that ignores its context when
// ctx ends, and says so; the time is the bubble's, so the test is exact.
func TestCloseHonoursItsContextWhileAnActionBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unblock, entered := make(chan struct{}), make(chan struct{})
		w := watchdog.New(watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
			close(entered)
			<-unblock // waits for the agent to shut down, ignoring ctx
			return nil
		}))
		_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = w.Close(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Contains(t, err.Error(), "still running")
		require.Equal(t, 200*time.Millisecond, time.Since(start))
		close(unblock)
		synctest.Wait()
	})
}
