package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
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

		err = callWith(s.Context(), "tool", watchdog.CallLimits{Cap: 5 * time.Minute, Idle: time.Minute}, func(ctx context.Context) error {
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

		// With an action of its own, a Watchdog may keep a session past its
		// limit (a failing action): its context promises no deadline.
		wa := watchdog.New(watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error { return nil }))
		defer wa.Close(context.Background())
		sa, err := wa.Start(context.Background(), "action", start, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		_, ok = sa.Context().Deadline()
		assert.False(t, ok)

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
	require.NoError(t, testwait.For(t, res, "the call's result"))
}

// A context ended by a time limit says so as a context with a deadline
// would: Err is context.DeadlineExceeded, for the session's and a call's
// context and for contexts derived from them with WithValue, while
// context.Cause stays the typed verdict. A stop, and a liveness rule of
// the user's, are no time limit: Err stays context.Canceled.
func TestAContextEndedByATimeLimitReportsDeadlineExceeded(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Minute})
	require.NoError(t, err)
	type key struct{}
	derived := context.WithValue(s.Context(), key{}, 1)
	entered := make(chan struct{})
	res := callAsync(s.Context(), "tool", time.Second, func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the call's cap")
		var v *watchdog.VerdictError
		assert.ErrorAs(t, context.Cause(ctx), &v)
		return ctx.Err()
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, time.Second, w)
	require.ErrorIs(t, testwait.For(t, res, "the call's result"), watchdog.ErrDeadlineExceeded)
	advance(t, mock, time.Minute, w)
	require.ErrorIs(t, s.Context().Err(), context.DeadlineExceeded)
	require.ErrorIs(t, derived.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

	stopped, err := w.Start(context.Background(), "stopped", mock.Now(), watchdog.Policy{})
	require.NoError(t, err)
	require.NoError(t, stopped.Stop())
	require.ErrorIs(t, stopped.Context().Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(stopped.Context()), watchdog.ErrSessionStopped)

	live, err := w.Start(context.Background(), "live", mock.Now(), watchdog.Policy{LivenessRules: []string{"probe"}, SettleChecks: 1})
	require.NoError(t, err)
	_, err = live.ReportLiveness("probe", true)
	require.NoError(t, err)
	require.NoError(t, w.Check(context.Background()))
	require.ErrorIs(t, live.Context().Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(live.Context()), watchdog.ErrLivenessFailed)
}
