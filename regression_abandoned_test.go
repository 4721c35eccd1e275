package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// Regression (fixed in the core; kept so it stays fixed): A phase abandoned at deadline + grace keeps the partial result it had; a
// late write from the abandoned function is dropped (and is no data race).
func TestAbandonedPhaseKeepsItsPartialAndDropsLateWrites(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour, HandlerGrace: time.Second})
	require.NoError(t, err)
	entered, late, fnDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	type out struct {
		r   watchdog.PhaseResult[int]
		err error
	}
	got := make(chan out, 1)
	go func() {
		r, err := watchdog.RunPhase(s, "plan", 10*time.Second, func(ctx context.Context, attempt int) (int, error) {
			defer close(fnDone)
			close(entered)
			<-late // ignores its context past the grace
			return 42, nil
		})
		got <- out{r, err}
	}()
	<-entered
	advance(t, mock, 11*time.Second, w)
	o := <-got
	close(late) // the abandoned function returns now, after RunPhase did
	<-fnDone
	require.ErrorIs(t, o.err, watchdog.ErrDeadlineExceeded)
	assert.Equal(t, 0, o.r.Partial)
	assert.Equal(t, "phase_deadline_exceeded", o.r.StopReasonCode)
}

// AbandonedHandlers counts the abandoned functions still running, not every
// running handler. In a synctest bubble, synctest.Wait tells when the
// abandoned function's goroutine is really gone.
func TestAbandonedHandlersCountsOnlyAbandonedFunctionsStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := newMock()
		w := watchdog.New(watchdog.WithClock(mock))
		s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour, HandlerGrace: time.Second})
		require.NoError(t, err)
		release, entered := make(chan struct{}), make(chan struct{})
		abandoned := make(chan error, 1)
		go func() {
			abandoned <- watchdog.Call(s.Context(), "stuck", time.Second, func(ctx context.Context) error {
				close(entered)
				<-release
				return nil
			})
		}()
		<-entered
		require.NoError(t, watchdogtest.Advance(context.Background(), mock, 2*time.Second, w))
		require.ErrorIs(t, <-abandoned, watchdog.ErrDeadlineExceeded)
		a, running := w.AbandonedHandlers()
		assert.Equal(t, [2]int64{1, 1}, [2]int64{a, running})

		healthyRelease, healthyIn, healthyDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(healthyDone)
			_ = watchdog.Call(s.Context(), "healthy", time.Hour, func(ctx context.Context) error {
				close(healthyIn)
				<-healthyRelease
				return nil
			})
		}()
		<-healthyIn
		close(release) // the abandoned function returns
		synctest.Wait()
		a, running = w.AbandonedHandlers()
		assert.Equal(t, int64(1), a)
		assert.Equal(t, int64(0), running, "a healthy in-time handler is not counted")
		close(healthyRelease)
		<-healthyDone
		require.NoError(t, w.Close(context.Background()))
	})
}
