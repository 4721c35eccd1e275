package watchdog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// A hung worker under IdleAfter(5s): it printed at the start, called a tool
// at +2 s, then went silent. Its last work was at +2 s, so it is stopped by
// +2 s + 5 s + one settle interval (0.5 s), not at the 60 s wall clock; the
// same worker under Policy{IdleWindow: 5s} alone (the plain fields keep
// their defaults: evidence TTL 30 s, three settle checks 10 s apart) is
// still running then.
func TestIdleAfterStopsASilentWorkerWithinDPlusOneSettleInterval(t *testing.T) {
	const d = 5 * time.Second
	preset := watchdog.IdleAfter(d)
	preset.WallClock = time.Minute
	for _, tc := range []struct {
		name    string
		p       watchdog.Policy
		stopped bool
	}{
		{"IdleAfter", preset, true},
		{"IdleWindow alone", watchdog.Policy{IdleWindow: d, WallClock: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := newMock()
			w := newWatchdog(t, mock, watchdog.NewMemoryStore())
			s, err := w.Start(context.Background(), "worker", t0, tc.p)
			require.NoError(t, err)
			s.Touch(watchdog.ChannelStdout)
			advance(t, mock, 2*time.Second, w)
			s.Touch(watchdog.ChannelMCPTool) // the last work
			advance(t, mock, d+d/10-time.Nanosecond, w)
			require.NoError(t, s.Context().Err(), "stopped before its last work + %v + one settle interval", d)
			advance(t, mock, 2*time.Nanosecond, w)
			if !tc.stopped {
				require.NoError(t, s.Context().Err())
				return
			}
			var v *watchdog.VerdictError
			require.True(t, errors.As(context.Cause(s.Context()), &v), "cause: %v", context.Cause(s.Context()))
			require.Equal(t, "idle", v.Rule)
			require.Equal(t, t0.Add(2*time.Second+d+d/10+time.Nanosecond), v.FiredAt)
		})
	}
}

// Under IdleAfter, work on any channel counts for d: a worker that only
// calls tools, every 4 s, outlives many idle windows of 5 s; so does one
// whose call with a deadline is in flight, and the call's end is work.
func TestIdleAfterCountsWorkOnEveryChannel(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "worker", t0, watchdog.IdleAfter(5*time.Second))
	require.NoError(t, err)
	for range 10 {
		s.Touch(watchdog.ChannelMCPTool)
		advance(t, mock, 4*time.Second, w)
	}
	require.NoError(t, s.Context().Err())
	release, ended := make(chan struct{}), make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		ended <- watchdog.Call(s.Context(), "build", time.Minute, func(ctx context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 30*time.Second, w)
	require.NoError(t, s.Context().Err(), "stopped with a call in flight")
	close(release)
	require.NoError(t, testwait.For(t, ended, "the call to end"))
	advance(t, mock, 5*time.Second+500*time.Millisecond+time.Nanosecond, w)
	var v *watchdog.VerdictError
	require.True(t, errors.As(context.Cause(s.Context()), &v), "not stopped 5.5 s after its call ended: %v", context.Cause(s.Context()))
	require.Equal(t, t0.Add(75*time.Second+500*time.Millisecond+time.Nanosecond), v.FiredAt, "the call's end counts as work")
}

func TestIdleAfterIsAPolicyOfPlainFields(t *testing.T) {
	p := watchdog.IdleAfter(5 * time.Second)
	require.Equal(t, watchdog.Policy{IdleWindow: 5 * time.Second, EvidenceTTL: 5 * time.Second,
		SettleChecks: 2, SettleInterval: 500 * time.Millisecond}, p)
	require.NoError(t, p.Validate())
	require.Equal(t, time.Nanosecond, watchdog.IdleAfter(time.Nanosecond).SettleInterval)
	require.ErrorIs(t, watchdog.IdleAfter(-time.Second).Validate(), watchdog.ErrInvalidPolicy)
}
