package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Done 7: recovery. A phase that idles twice is retried twice and succeeds
// on the third attempt; with a budget of one retry it ends with
// recovery_budget_exceeded and the last partial result.
func TestPhaseThatIdlesTwiceSucceedsOnTheThirdAttempt(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		RecoveryBudget: 2, RecoveryBackoff: time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)

	attempts := make(chan int)
	type out struct {
		res watchdog.PhaseResult[string]
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			if attempt < 3 {
				<-ctx.Done() // the agent hangs silently
				return fmt.Sprintf("draft %d", attempt), context.Cause(ctx)
			}
			return "done", nil
		})
		done <- out{res, err}
	}()
	require.Equal(t, 1, <-attempts)
	advance(t, mock, 10*time.Second+1, w) // idle: attempt 1 is cancelled
	advance(t, mock, time.Second, w)      // backoff 1 s
	require.Equal(t, 2, <-attempts)
	advance(t, mock, 10*time.Second+1, w)
	advance(t, mock, 2*time.Second, w) // backoff doubles
	require.Equal(t, 3, <-attempts)
	o := <-done
	require.NoError(t, o.err)
	assert.Equal(t, 3, o.res.Attempts)
	assert.Equal(t, "done", o.res.Partial)
	assert.Empty(t, o.res.StopReasonCode)
	require.NoError(t, s.Context().Err(), "idleness ended attempts, not the session")

	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindAttemptCancelled), 2)
	r := ofKind(evs, watchdog.KindRetry)
	require.Len(t, r, 2)
	assert.Equal(t, []int{2, 3}, []int{r[0].Attempt, r[1].Attempt})
	assert.Equal(t, "implement", r[0].Phase)
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
}

func TestPhaseRetriesRunOutWithTheLastPartialResult(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		RecoveryBudget: 1, RecoveryBackoff: time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	attempts := make(chan int)
	type out struct {
		res watchdog.PhaseResult[string]
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			<-ctx.Done()
			return fmt.Sprintf("draft %d", attempt), context.Cause(ctx)
		})
		done <- out{res, err}
	}()
	require.Equal(t, 1, <-attempts)
	advance(t, mock, 10*time.Second+1, w)
	advance(t, mock, time.Second, w)
	require.Equal(t, 2, <-attempts)
	advance(t, mock, 10*time.Second+1, w)
	o := <-done
	require.ErrorIs(t, o.err, watchdog.ErrRecoveryBudgetExceeded)
	require.ErrorIs(t, o.err, watchdog.ErrIdleExceeded)
	assert.Equal(t, "recovery_budget_exceeded", o.res.StopReasonCode)
	assert.Equal(t, "draft 2", o.res.Partial)
	assert.Equal(t, 2, o.res.Attempts)
	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindRetry), 1)
	rb := ofKind(evs, watchdog.KindRecoveryBudgetExceeded)
	require.Len(t, rb, 1)
	assert.Equal(t, "recovery_budget_exceeded", rb[0].StopReasonCode)
}

// The wall clock and the ceilings are never retried.
func TestWallClockInsideAPhaseIsNotRetried(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	entered := make(chan struct{})
	type out struct {
		res watchdog.PhaseResult[int]
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := watchdog.RunPhase(s, "p", 0, func(ctx context.Context, attempt int) (int, error) {
			close(entered)
			<-ctx.Done()
			return attempt, ctx.Err()
		})
		done <- out{res, err}
	}()
	<-entered
	advance(t, mock, 11*time.Second, w)
	o := <-done
	require.ErrorIs(t, o.err, watchdog.ErrWallClockExceeded)
	assert.Equal(t, 1, o.res.Attempts)
	assert.Equal(t, "watchdog_wall_clock_exceeded", o.res.StopReasonCode)
}
