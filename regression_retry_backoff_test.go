package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): Between attempts (the backoff sleep) no attempt is registered, and the idle
// clock restarted at the cancel, not at the next attempt's start: a backoff
// >= IdleWindow lets the idle rule end the whole session during the backoff
// instead of retrying.
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
		_, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			<-ctx.Done()
			return "", context.Cause(ctx)
		})
		done <- err
	}()
	require.Equal(t, 1, <-attempts)
	advance(t, mock, 10*time.Second+1, w) // attempt 1 cancelled by idleness: a retry is due in 15 s
	advance(t, mock, 15*time.Second, w)
	require.NoError(t, s.Context().Err(), "the session was killed during the retry backoff")
}
