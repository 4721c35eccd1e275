package watchdog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// An operator's stop is not a completion: its stop event has its own
// reason code and says who stopped the session and why, the worker's
// context says so too, and Run reports it as resumable.
func TestStopByRecordsWhoAndWhyApartFromACompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		done := make(chan struct{})
		var res watchdog.Result
		var runErr error
		go func() {
			defer close(done)
			res, runErr = s.Run(func(ctx context.Context) error {
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
		time.Sleep(time.Minute)
		require.NoError(t, s.StopBy("alice@ops", "runaway tool loop"))
		<-done

		cause := context.Cause(s.Context())
		require.ErrorIs(t, cause, watchdog.ErrSessionStopped)
		assert.Contains(t, cause.Error(), "alice@ops")
		assert.Contains(t, cause.Error(), "runaway tool loop")
		assert.Equal(t, watchdog.StopRequested, res.StopReasonCode)
		assert.True(t, res.Resumable)
		require.ErrorIs(t, runErr, watchdog.ErrSessionStopped)

		synctest.Wait()
		evs := load(t, store, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds(evs))
		assert.Equal(t, watchdog.StopRequested, evs[1].Reason)
		assert.Equal(t, "alice@ops", evs[1].By)
		assert.Equal(t, "runaway tool loop", evs[1].Why)
		require.NoError(t, s.Stop(), "a later Stop of the stopped window is a no-op")
		require.NoError(t, w.Close(context.Background()))
	})
}

// A plain Stop while Run's function is running reports a completion, not a
// cancellation: Stop means the work is done.
func TestStopDuringRunReportsCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New()
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		go func() { time.Sleep(time.Second); _ = s.Stop() }()
		res, err := s.Run(func(ctx context.Context) error { <-ctx.Done(); return nil })
		require.NoError(t, err)
		assert.Equal(t, watchdog.StopCompleted, res.StopReasonCode)
		assert.False(t, res.Resumable)
		require.NoError(t, w.Close(context.Background()))
	})
}

// Bad input to StopBy changes nothing: the window goes on. A StopBy of a
// window the watchdog already ended returns the verdict and records
// nothing.
func TestStopByRefusesBadInputAndAnEndedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		for _, c := range []struct{ by, why string }{{"", "why"}, {"alice", ""}, {strings.Repeat("x", 1025), "why"}, {"alice", "bad\xffutf8"}} {
			err := s.StopBy(c.by, c.why)
			require.ErrorIs(t, err, watchdog.ErrInvalidArgument, "by %q why %q", c.by, c.why)
		}
		require.NoError(t, s.Context().Err(), "bad input leaves the window running")
		var nilS *watchdog.Session
		require.ErrorIs(t, nilS.StopBy("a", "b"), watchdog.ErrInvalidArgument)

		<-s.Context().Done()
		synctest.Wait()
		err = s.StopBy("alice", "too late")
		var v *watchdog.VerdictError
		require.True(t, errors.As(err, &v), "got %v", err)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store, "agent")))
		require.NoError(t, w.Close(context.Background()))
	})
}
