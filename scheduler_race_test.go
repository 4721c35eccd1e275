package watchdog_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// A deadline pushed while the scheduler handles the one before it still
// arms the real clock's timer: here the scheduler runs a whole pass (it
// fires an overdue session) in the middle of that session's arming, and a
// session started afterwards is still cancelled at its deadline. (With the
// timer reset before the armed instant was stored, that pass left a stale
// instant behind, and no later deadline armed the timer again: seen as
// adopted windows nobody decided under load.)
func TestADeadlineArmedWhileAPassRunsStillWakesTheScheduler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New() // the real clock: synctest's fake time
		ctx := context.Background()
		var hooked atomic.Bool
		var once sync.Once
		watchdog.SetArmHook(w, func() {
			if hooked.Load() {
				once.Do(synctest.Wait) // whatever the scheduler can do now, it does
			}
		})
		hooked.Store(true)
		overdue, err := w.Start(ctx, "overdue", time.Now().Add(-2*time.Hour), watchdog.Policy{WallClock: time.Hour, SessionCeiling: time.Hour})
		require.NoError(t, err)
		synctest.Wait()
		require.ErrorIs(t, context.Cause(overdue.Context()), watchdog.ErrSessionCeilingExceeded)

		next, err := w.Start(ctx, "next", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		require.ErrorIs(t, context.Cause(next.Context()), watchdog.ErrWallClockExceeded, "cancelled at its deadline")
		require.NoError(t, w.Close(ctx))
	})
}
