package watchdog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// failOnce is an action that fails its first call and succeeds after.
func failOnce(calls *atomic.Int32) watchdog.Option {
	return watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error {
		if calls.Add(1) == 1 {
			return errors.New("restart failed")
		}
		return nil
	})
}

// at is each event's instant after t0, by kind, in order.
func at(evs []watchdog.Event, kind string) []time.Duration {
	var out []time.Duration
	for _, e := range ofKind(evs, kind) {
		out = append(out, e.OccurredAt.Sub(t0))
	}
	return out
}

// A failed action of a settle-windowed rule is retried one settle interval
// later (its first backoff), as a prober retries a failed restart at its
// next period: the retry is the decision's last settle check again, not a
// new settle window of stale observations.
func TestAFailedIdleActionIsRetriedOneSettleIntervalLater(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var calls atomic.Int32
	w := newWatchdog(t, mock, store, failOnce(&calls))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleInterval: 10 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)

	advance(t, mock, 30*time.Second+1, w) // stale at 10, 20 and 30 s: the decision, whose action fails
	require.NoError(t, s.Context().Err())
	advance(t, mock, 10*time.Second-1, w)
	require.NoError(t, s.Context().Err(), "not before the backoff")
	advance(t, mock, 1, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)

	evs := load(t, store, "s")
	d := 30*time.Second + 1
	assert.Equal(t, []time.Duration{d, d + 10*time.Second}, at(evs, watchdog.KindDecision))
	assert.Equal(t, []time.Duration{d}, at(evs, watchdog.KindActionFailed))
	assert.Equal(t, int32(2), calls.Load())
}

// Evidence of work during the backoff clears the retry: the session is no
// longer idle, and a new idle episode needs a whole settle window again.
func TestEvidenceDuringAFailedActionsBackoffClearsTheRetry(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var calls atomic.Int32
	w := newWatchdog(t, mock, store, failOnce(&calls))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleInterval: 10 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 30*time.Second+1, w) // the decision; its action fails
	advance(t, mock, 5*time.Second, w)
	s.Touch(watchdog.ChannelStdout) // at 35 s: working again
	advance(t, mock, 20*time.Second, w)
	require.NoError(t, s.Context().Err(), "working at the retry's instant")
	assert.Len(t, ofKind(load(t, store, "s"), watchdog.KindDecision), 1)

	// Silent since the touch: stale one idle window and a nanosecond after
	// it, then at each settle interval: a new settle window of three.
	touched := 35*time.Second + 1
	advance(t, mock, touched+30*time.Second-mock.Now().Sub(t0), w)
	require.NoError(t, s.Context().Err())
	advance(t, mock, 1, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	assert.Equal(t, touched+30*time.Second+1, at(load(t, store, "s"), watchdog.KindDecision)[1])
}

// A liveness rule of the user's whose action failed acts again at its first
// stale report one settle interval later, not after a new settle window.
func TestAFailedLivenessActionIsRetriedAtTheFirstStaleReportAfterTheBackoff(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var calls atomic.Int32
	w := newWatchdog(t, mock, store, failOnce(&calls))
	p := watchdog.Policy{WallClock: time.Hour, LivenessRules: []string{"probe"}, SettleInterval: 10 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	var decided bool
	for range 3 {
		advance(t, mock, 10*time.Second, w)
		decided, err = s.ReportLiveness("probe", true)
		require.NoError(t, err)
	}
	require.True(t, decided)
	require.NoError(t, w.Check(context.Background())) // the action ran, and failed
	require.NoError(t, s.Context().Err())

	advance(t, mock, 5*time.Second, w)
	decided, err = s.ReportLiveness("probe", true)
	require.NoError(t, err)
	require.False(t, decided, "within the backoff")
	advance(t, mock, 5*time.Second, w)
	decided, err = s.ReportLiveness("probe", true)
	require.NoError(t, err)
	require.True(t, decided, "the first stale report after the backoff acts")
	require.NoError(t, w.Check(context.Background()))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrLivenessFailed)
	assert.Equal(t, int32(2), calls.Load())
}
