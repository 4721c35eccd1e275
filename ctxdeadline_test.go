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

// On the real clock (here a synctest bubble's) ctx.Deadline() reports the
// earliest absolute limit known in advance, so that deadline-aware clients
// (net/http, gRPC, pgx) can size and forward their own timeouts: the
// session's wall-clock budget or ceiling, a call's cap, a parent's deadline.
func TestContextsReportTheEarliestAbsoluteLimitAsTheirDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New()
		defer w.Close(context.Background())
		start := time.Now()

		s, err := w.Start(context.Background(), "budget", start, watchdog.Policy{WallClock: time.Hour, SessionCeiling: 2 * time.Hour})
		require.NoError(t, err)
		d, ok := s.Context().Deadline()
		require.True(t, ok)
		assert.True(t, d.Equal(start.Add(time.Hour)), "the wall-clock budget: %v", d)

		s2, err := w.Start(context.Background(), "ceiling", start.Add(-90*time.Minute), watchdog.Policy{WallClock: 3 * time.Hour, SessionCeiling: 2 * time.Hour})
		require.NoError(t, err)
		d, _ = s2.Context().Deadline()
		assert.True(t, d.Equal(start.Add(30*time.Minute)), "the ceiling, from the session's start: %v", d)

		s3, err := w.Start(context.Background(), "advice", start, watchdog.Policy{WallClock: time.Hour, Mode: watchdog.ModeShadow})
		require.NoError(t, err)
		_, ok = s3.Context().Deadline()
		assert.False(t, ok, "a rule in shadow mode ends nothing")

		s4, err := w.Start(context.Background(), "supervised", start, watchdog.Policy{WallClock: time.Hour, SupervisedOnly: true})
		require.NoError(t, err)
		_, ok = s4.Context().Deadline()
		assert.False(t, ok, "a budget of supervised time has no instant known in advance")

		parent, cancel := context.WithDeadline(context.Background(), start.Add(10*time.Minute))
		defer cancel()
		s5, err := w.Start(parent, "parent", start, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		d, _ = s5.Context().Deadline()
		assert.True(t, d.Equal(start.Add(10*time.Minute)), "the parent's, earlier")

		err = watchdog.CallWith(s.Context(), "tool", watchdog.CallLimits{Cap: 5 * time.Minute, Idle: time.Minute}, func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			assert.True(t, ok)
			assert.True(t, d.Equal(start.Add(5*time.Minute)), "the call's cap: %v", d)
			return watchdog.Call(ctx, "inner", time.Hour, func(ctx context.Context) error {
				d, _ := ctx.Deadline()
				assert.True(t, d.Equal(start.Add(5*time.Minute)), "the enclosing call's cap, earlier")
				return nil
			})
		})
		require.NoError(t, err)

		err = watchdog.Call(context.Background(), "alone", time.Minute, func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			assert.True(t, ok)
			assert.True(t, d.Equal(start.Add(time.Minute)), "without a session, on real timers")
			return nil
		})
		require.NoError(t, err)
	})
}

// Under a custom Clock such as the mock, contexts report no deadline of
// their own: deadline-aware libraries compare it with the real clock.
func TestUnderAMockClockContextsReportNoDeadlineOfTheirOwn(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	_, ok := s.Context().Deadline()
	assert.False(t, ok)
	res := callAsync(s.Context(), "tool", time.Minute, func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		assert.False(t, ok)
		return nil
	})
	require.NoError(t, <-res)
}
