package watchdog_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// hookClock is a mock clock that runs a hook once, inside the scheduler's
// first reading at or after an instant: what another goroutine does
// between the moment the scheduler reads the clock and the moment it looks
// at the evidence.
type hookClock struct {
	*clock.Mock
	at   time.Time
	hook atomic.Pointer[func()]
}

func (c *hookClock) Now() time.Time {
	t := c.Mock.Now()
	if !t.Before(c.at) && c.hook.Load() != nil && inPass() {
		if f := c.hook.Swap(nil); f != nil {
			(*f)()
		}
	}
	return t
}

// inPass reports whether the scheduler's pass is on the caller's stack.
func inPass() bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "watchdog.(*Watchdog).pass") {
			return true
		}
		if !more {
			return false
		}
	}
}

// Evidence recorded after the scheduler read the clock for a verdict, but
// before the verdict looked at it, is never dated after the verdict: the
// verdict is decided at the evidence's instant, and the evidence is dated
// when it happened (its age is zero, never negative).
func TestEvidenceTouchedWhileAVerdictIsDecidedIsNeverDatedAfterIt(t *testing.T) {
	mock := newMock()
	c := &hookClock{Mock: mock, at: t0.Add(10 * time.Second)}
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(c), watchdog.WithStore(store))
	defer w.Close(context.Background())
	s, err := w.Start(context.Background(), "agent", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	touchedAt := t0.Add(10*time.Second + time.Microsecond)
	hook := func() {
		mock.Set(touchedAt) // the clock moves on between the reading and the snapshot
		s.Touch(watchdog.ChannelStdout)
	}
	c.hook.Store(&hook)
	advance(t, mock, 10*time.Second, w)
	testwait.For(t, s.Context().Done(), "the session's context to end")
	require.NoError(t, w.Close(context.Background()))

	d := ofKind(load(t, store, "agent"), watchdog.KindDecision)
	require.Len(t, d, 1)
	last := entry(t, d[0], "stdout").LastAt
	require.NotNil(t, last)
	assert.Equal(t, touchedAt, last.UTC(), "dated when it happened")
	assert.False(t, last.After(d[0].OccurredAt), "evidence at %v, after the verdict at %v", last, d[0].OccurredAt)
	assert.Equal(t, touchedAt, d[0].OccurredAt.UTC(), "the verdict is decided at the evidence's instant")
}

// Under a fake clock every rule fires at its exact instant: evidence off
// any grid (at 30 ms) is dated at 30 ms, and a 9.5 s idle window acting at
// its first stale check ends the session just past 9.53 s, not at a 50 ms
// step.
func TestInASynctestBubbleTheIdleRuleFiresAtItsExactInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		defer w.Close(context.Background())
		start := time.Now()
		s, err := w.Start(context.Background(), "agent", start, watchdog.Policy{
			WallClock: time.Hour, IdleWindow: 9500 * time.Millisecond, EvidenceTTL: time.Second, SettleChecks: 1,
		})
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond)
		s.Touch(watchdog.ChannelStdout)
		<-s.Context().Done()
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
		assert.Equal(t, 9530*time.Millisecond+time.Nanosecond, time.Since(start), "just past 9.5 s after the last output")
		synctest.Wait()
		d := ofKind(load(t, store, "agent"), watchdog.KindDecision)
		require.Len(t, d, 1)
		assert.Equal(t, start.Add(30*time.Millisecond).UTC(), entry(t, d[0], "stdout").LastAt.UTC())
	})
}

// The same on a clock.Mock: evidence at 30 ms, the idle fire one
// nanosecond past 9.53 s (the window is exceeded, not reached).
func TestOnAMockClockTheIdleRuleFiresAtItsExactInstant(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "agent", t0, watchdog.Policy{
		WallClock: time.Hour, IdleWindow: 9500 * time.Millisecond, EvidenceTTL: time.Second, SettleChecks: 1,
	})
	require.NoError(t, err)
	advance(t, mock, 30*time.Millisecond, w)
	s.Touch(watchdog.ChannelStdout)
	advance(t, mock, 9500*time.Millisecond, w)
	require.NoError(t, s.Context().Err(), "not at 9.5 s of silence: only past it")
	advance(t, mock, time.Nanosecond, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	d := ofKind(load(t, store, "agent"), watchdog.KindDecision)
	require.Len(t, d, 1)
	assert.Equal(t, t0.Add(9530*time.Millisecond+time.Nanosecond), d[0].OccurredAt.UTC())
}
