package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// Recovery: a phase that idles twice is retried twice, the backoff doubling,
// and succeeds on the third attempt; idleness ended the attempts, not the
// session.
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
		partial  string
		attempts int
		err      error
	}
	done := make(chan out, 1)
	go func() {
		partial, n, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			if attempt < 3 {
				<-ctx.Done() // the agent hangs silently
				return fmt.Sprintf("draft %d", attempt), context.Cause(ctx)
			}
			return "done", nil
		})
		done <- out{partial, n, err}
	}()
	require.Equal(t, 1, testwait.For(t, attempts, "attempt 1"))
	advance(t, mock, 10*time.Second+1, w) // idle: attempt 1 is cancelled
	advance(t, mock, time.Second, w)      // backoff 1 s
	require.Equal(t, 2, testwait.For(t, attempts, "attempt 2"))
	advance(t, mock, 10*time.Second+1, w)
	advance(t, mock, 2*time.Second, w) // backoff doubles
	require.Equal(t, 3, testwait.For(t, attempts, "attempt 3"))
	o := testwait.For(t, done, "RunPhase to return")
	require.NoError(t, o.err)
	assert.Equal(t, 3, o.attempts)
	assert.Equal(t, "done", o.partial)
	require.NoError(t, s.Context().Err(), "idleness ended attempts, not the session")

	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindAttemptCancelled), 2)
	r := ofKind(evs, watchdog.KindRetry)
	require.Len(t, r, 2)
	assert.Equal(t, []int{2, 3}, []int{r[0].Attempt, r[1].Attempt})
	assert.Equal(t, "implement", r[0].Handler)
	assert.Equal(t, "phase", r[0].Layer)
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
}

// With a budget of one retry, a phase that idles on every attempt ends with
// recovery_budget_exceeded and the last attempt's partial result.
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
		partial  string
		attempts int
		err      error
	}
	done := make(chan out, 1)
	go func() {
		partial, n, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			<-ctx.Done()
			return fmt.Sprintf("draft %d", attempt), context.Cause(ctx)
		})
		done <- out{partial, n, err}
	}()
	require.Equal(t, 1, testwait.For(t, attempts, "attempt 1"))
	advance(t, mock, 10*time.Second+1, w)
	advance(t, mock, time.Second, w)
	require.Equal(t, 2, testwait.For(t, attempts, "attempt 2"))
	advance(t, mock, 10*time.Second+1, w)
	o := testwait.For(t, done, "RunPhase to return")
	require.ErrorIs(t, o.err, watchdog.ErrRecoveryBudgetExceeded)
	require.ErrorIs(t, o.err, watchdog.ErrIdleExceeded)
	assert.Equal(t, "draft 2", o.partial)
	assert.Equal(t, 2, o.attempts)
	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindRetry), 1)
	rb := ofKind(evs, watchdog.KindRecoveryBudgetExceeded)
	require.Len(t, rb, 1)
	assert.Equal(t, "implement", rb[0].Handler)
	assert.Equal(t, "idle_exceeded", rb[0].Reason)
}

// The wall clock and the ceilings are never retried.
func TestWallClockInsideAPhaseIsNotRetried(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	entered := make(chan struct{})
	type out struct {
		partial  int
		attempts int
		err      error
	}
	done := make(chan out, 1)
	go func() {
		partial, n, err := watchdog.RunPhase(s, "p", 0, func(ctx context.Context, attempt int) (int, error) {
			close(entered)
			<-ctx.Done()
			return attempt, ctx.Err()
		})
		done <- out{partial, n, err}
	}()
	testwait.For(t, entered, "the phase's function to be entered")
	advance(t, mock, 11*time.Second, w)
	o := testwait.For(t, done, "RunPhase to return")
	require.ErrorIs(t, o.err, watchdog.ErrWallClockExceeded)
	assert.Equal(t, 1, o.attempts)
}

// A phase whose function ignores its context is abandoned at its deadline
// plus HandlerGrace: RunPhase returns the partial result it had then (none
// here) with phase_deadline_exceeded, and the value the abandoned function
// returns later is dropped, with no data race. The caller can move on with
// what it has; nothing changes under it afterwards.
func TestAbandonedPhaseKeepsItsPartialAndDropsLateWrites(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour, HandlerGrace: time.Second})
	require.NoError(t, err)
	entered, late, fnDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	type out struct {
		partial  int
		attempts int
		err      error
	}
	got := make(chan out, 1)
	go func() {
		partial, n, err := watchdog.RunPhase(s, "plan", 10*time.Second, func(ctx context.Context, attempt int) (int, error) {
			defer close(fnDone)
			close(entered)
			<-late // ignores its context past the grace
			return 42, nil
		})
		got <- out{partial, n, err}
	}()
	testwait.For(t, entered, "the phase's function to be entered")
	advance(t, mock, 11*time.Second, w)
	o := testwait.For(t, got, "RunPhase to return")
	close(late) // the abandoned function returns now, after RunPhase did
	testwait.For(t, fnDone, "the abandoned function to return")
	require.ErrorIs(t, o.err, watchdog.ErrDeadlineExceeded)
	assert.Equal(t, 0, o.partial)
	var v *watchdog.VerdictError
	require.ErrorAs(t, o.err, &v)
	assert.Equal(t, "phase_deadline_exceeded", v.StopReasonCode())
}

// The idle rule does not act during RunPhase's backoff between attempts: a
// RecoveryBackoff longer than the IdleWindow (15 s against 10 s) delays the
// retry, it does not end the session. Otherwise any backoff at least as long
// as the idle window would turn a recoverable idle cancel into the end of
// the whole session.
func TestIdleRuleIsSuspendedDuringARetryBackoff(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		RecoveryBudget: 3, RecoveryBackoff: 15 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	attempts := make(chan int, 4)
	done := make(chan error, 1)
	go func() {
		_, _, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			<-ctx.Done()
			return "", context.Cause(ctx)
		})
		done <- err
	}()
	require.Equal(t, 1, testwait.For(t, attempts, "attempt 1"))
	advance(t, mock, 10*time.Second+1, w) // attempt 1 cancelled by idleness: a retry is due in 15 s
	advance(t, mock, 15*time.Second, w)
	require.NoError(t, s.Context().Err(), "the session was killed during the retry backoff")
}

// A negative RecoveryBudget turns retries off: the first recoverable
// failure ends the phase.
func TestANegativeRecoveryBudgetMeansNoRetries(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1, RecoveryBudget: -1}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, n, err := watchdog.RunPhase(s, "p", 0, func(ctx context.Context, attempt int) (int, error) {
			close(entered)
			<-ctx.Done()
			return 0, context.Cause(ctx)
		})
		assert.Equal(t, 1, n)
		done <- err
	}()
	testwait.For(t, entered, "the phase's function to be entered")
	advance(t, mock, 10*time.Second+1, w)
	require.ErrorIs(t, testwait.For(t, done, "RunPhase to return"), watchdog.ErrRecoveryBudgetExceeded)
}
