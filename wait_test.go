package watchdog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

func TestWaitingWatchdogFiresOnceWithoutCancellingAndStaleArmsNeverFire(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)

	var calls atomic.Int32
	fired := make(chan uint64, 4)
	cb := func(ctx context.Context, got *watchdog.Session, gen uint64) {
		calls.Add(1)
		fired <- gen
	}

	// A resume before the fire supersedes it: the callback never runs.
	g1 := s.Wait(time.Minute, cb)
	advance(t, mock, 30*time.Second, w)
	assert.True(t, s.EndWait())
	advance(t, mock, 5*time.Second, w) // past g1's instant
	s.Touch(watchdog.ChannelStdout)
	assert.Zero(t, calls.Load())

	// Each arm supersedes the previous one.
	g2 := s.Wait(0, cb) // server sent no timeout: 30 min
	g3 := s.Wait(2*time.Minute, cb)
	assert.Less(t, g1, g2)
	assert.Less(t, g2, g3)
	advance(t, mock, 2*time.Minute, w) // the idle rule is suspended while waiting
	require.Equal(t, g3, testwait.For(t, fired, "the wait's callback"))
	require.NoError(t, context.Cause(s.Context()), "the fire does not cancel")
	assert.False(t, s.EndWait(), "the fire ends the waiting state")
	s.Wait(time.Hour, nil)              // the agent's next turn yields again
	advance(t, mock, 40*time.Minute, w) // g2's instant passes: superseded
	assert.Equal(t, int32(1), calls.Load(), "the callback runs exactly once")
	require.NoError(t, context.Cause(s.Context()))

	evs := load(t, store, "s")
	wt := ofKind(evs, watchdog.KindWaitTimeout)
	require.Len(t, wt, 1)
	assert.Equal(t, g3, wt[0].Generation)
	assert.Equal(t, 120.0, wt[0].LimitSeconds)
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
}

func TestIdleDuringAWaitIsSuspendedButTheWallClockIsNot(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Minute, IdleWindow: time.Second, SettleChecks: 1})
	require.NoError(t, err)
	s.Wait(time.Hour, nil)
	advance(t, mock, 59*time.Second, w)
	require.NoError(t, s.Context().Err())
	advance(t, mock, 2*time.Second, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
}

// StartupGrace lasts until the first baseline output or until StartupGrace
// has passed since the window started, once per window: after a wait, a
// session that had already printed gets the idle window, not a new startup
// grace, so silent 60 s after EndWait with a 10 s idle window it is stopped.
func TestStartupGraceIsNotGrantedAgainAfterAWait(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: 4 * time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		StartupGrace: 5 * time.Minute}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout) // printed: the grace is over
	s.Wait(time.Hour, nil)
	advance(t, mock, time.Minute, w)
	s.EndWait()
	advance(t, mock, time.Minute, w) // silent for 60 s > IdleWindow after the wait ended
	require.Error(t, s.Context().Err(), "silent 60 s after EndWait with a 10 s idle window; the startup grace was re-applied")
}
