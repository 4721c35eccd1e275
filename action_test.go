package watchdog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// Decision first, then action: with a custom action, the verdict is derived
// again at the action's own instant; fresh evidence in between supersedes it.
// Here b's idle decision waits behind b's own Wait callback, and b speaks up
// meanwhile.
func TestFreshEvidenceBeforeTheActionSupersedesTheDecision(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	entered, release := make(chan struct{}), make(chan struct{})
	idleDecided := make(chan struct{})
	var acted []string
	w := newWatchdog(t, mock, store,
		watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
			acted = append(acted, v.Rule)
			return nil
		}),
		watchdog.WithObserver(watchdog.Observer{OnEvent: func(e watchdog.Event) {
			if e.Kind == watchdog.KindDecision && e.Rule == "idle" {
				close(idleDecided)
			}
		}}))
	b, err := w.Start(context.Background(), "b", t0, idlePolicy())
	require.NoError(t, err)
	b.Wait(time.Second, func(context.Context, *watchdog.Session, uint64) {
		close(entered)
		<-release // holds b's actions
	})
	mock.Add(time.Second)
	testwait.For(t, entered, "the wait's callback to be entered") // the wait timed out at t0+1s: idleness counts from there

	mock.Add(10*time.Second + 1)
	checked := make(chan error, 1)
	go func() { checked <- w.Check(context.Background()) }()
	testwait.For(t, idleDecided, "the idle decision") // the idle action waits behind the callback
	b.Touch(watchdog.ChannelStdout)                   // b speaks up before its action runs
	close(release)
	require.NoError(t, testwait.For(t, checked, "Check to return"))
	require.NoError(t, w.Check(context.Background()))

	require.NoError(t, b.Context().Err(), "b was not killed")
	assert.Empty(t, acted)
	evs := load(t, store, "b")
	dec, sup := ofKind(evs, watchdog.KindDecision), ofKind(evs, watchdog.KindSuperseded)
	require.Len(t, dec, 1)
	require.Len(t, sup, 1)
	assert.Equal(t, dec[0].ID, sup[0].DecidedByDecisionID)
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
}

// One session's stuck action delays no other session's: each session's
// actions run on a goroutine of their own.
func TestAStuckActionOfOneSessionDelaysNoOtherSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		w := watchdog.New(watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
			if s.ID() == "stuck" {
				<-release // ignores its context
			}
			return nil
		}))
		start := time.Now()
		_, err := w.Start(context.Background(), "stuck", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		other, err := w.Start(context.Background(), "other", start, watchdog.Policy{WallClock: 2 * time.Second})
		require.NoError(t, err)
		<-other.Context().Done()
		assert.Equal(t, 2*time.Second+time.Nanosecond, time.Since(start), "other's action ran at its instant")
		require.ErrorIs(t, context.Cause(other.Context()), watchdog.ErrWallClockExceeded)
		close(release)
		require.NoError(t, w.Close(context.Background()))
	})
}

func TestAFailingActionIsRecordedAndNeverBypassed(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var calls atomic.Int32
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
		if calls.Add(1) == 1 {
			return errors.New("permission denied")
		}
		return nil
	}))
	p := watchdog.Policy{WallClock: 10 * time.Second, SettleInterval: 5 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 10*time.Second+1, w)
	require.NoError(t, s.Context().Err(), "a failed action is not bypassed by cancelling")
	evs := load(t, store, "s")
	f := ofKind(evs, watchdog.KindActionFailed)
	require.Len(t, f, 1)
	assert.Equal(t, "permission denied", f[0].Error)
	assert.Equal(t, ofKind(evs, watchdog.KindDecision)[0].ID, f[0].DecidedByDecisionID)

	advance(t, mock, 5*time.Second, w) // looked at again one settle interval later
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
	evs = load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindDecision), 2)
	assert.Len(t, ofKind(evs, watchdog.KindCancel), 1)
}

// An action that keeps failing stays loud and is never bypassed, but the
// rule is looked at again after a backoff that doubles from the settle
// interval up to 10 minutes: a stuck session writes a bounded number of
// events an hour (six decisions and six action_failed once at the cap).
func TestAFailingActionBacksOffToABoundedNumberOfEventsAnHour(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error {
		return errors.New("permission denied")
	}))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	advance(t, mock, 10*time.Second+1, w)
	advance(t, mock, time.Hour, w)
	require.NoError(t, s.Context().Err(), "never bypassed")
	f := ofKind(load(t, store, "s"), watchdog.KindActionFailed)
	var backoffs []float64
	for i, e := range f {
		assert.Equal(t, i+1, e.Attempt)
		backoffs = append(backoffs, e.LimitSeconds)
	}
	assert.Equal(t, []float64{10, 20, 40, 80, 160, 320, 600, 600, 600, 600, 600}, backoffs)

	before := len(f)
	advance(t, mock, time.Hour, w)
	assert.Equal(t, 6, len(ofKind(load(t, store, "s"), watchdog.KindActionFailed))-before, "six failures an hour at the cap")
	assert.Equal(t, 1, w.Stats().FailingActions, "visible as a metric")
	require.NoError(t, s.Stop())
	assert.Zero(t, w.Stats().FailingActions, "the window is over")
}

// With a custom action and the default SettleChecks (3), a session silent
// past its settle window gets its action, once: the verdict derived again at
// the action's instant still acts, so nothing supersedes the decision. A
// custom action must run for the idle rule as it does for the wall clock.
func TestCustomActionRunsForTheIdleRuleWithASettleWindow(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var acted atomic.Int32
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
		acted.Add(1)
		return nil
	}))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 10*time.Minute, w)
	evs := load(t, store, "s")
	require.Zero(t, countKind(evs, watchdog.KindSuperseded), "nothing superseded the decision")
	require.Equal(t, int32(1), acted.Load(), "the action should have run for a session silent for 10 minutes")
	require.Error(t, s.Context().Err())
}

// When a decision queued behind an earlier callback of its session is
// derived again and a rule in shadow mode has come due meanwhile (b's
// session ceiling, while b's Wait callback blocks), the advice leaves b
// watched: its wall clock still ends it later. A shadow rule only advises;
// it never takes a session out of the schedule.
func TestAShadowAdviceAtActionTimeKeepsTheSessionWatched(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	entered, release := make(chan struct{}), make(chan struct{})
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error {
		return nil
	}))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		SessionCeiling: 15 * time.Second, RuleModes: map[string]watchdog.Mode{"session_ceiling": watchdog.ModeShadow}}
	b, err := w.Start(context.Background(), "b", t0, p)
	require.NoError(t, err)
	b.Touch(watchdog.ChannelStdout)
	b.Wait(time.Second, func(context.Context, *watchdog.Session, uint64) {
		close(entered)
		<-release // holds b's lane: its actions queue behind
	})
	mock.Add(time.Second)
	testwait.For(t, entered, "the wait's callback to be entered")
	b.EndWait()

	mock.Add(9*time.Second + 1) // b's idle decision: its action waits behind the callback
	checked := make(chan error, 1)
	go func() { checked <- w.Check(context.Background()) }()
	mock.Add(10 * time.Second) // b passes its (shadow) session ceiling meanwhile
	close(release)
	require.NoError(t, testwait.For(t, checked, "Check to return"))
	require.NoError(t, w.Check(context.Background()))
	shadow := 0
	for _, e := range ofKind(load(t, store, "b"), watchdog.KindDecision) {
		if e.Mode == watchdog.ModeShadow && e.Rule == "session_ceiling" {
			shadow++
		}
	}
	require.Positive(t, shadow, "the ceiling advised")

	advance(t, mock, 2*time.Hour, w)
	require.Error(t, b.Context().Err(), "b outlived its 1h wall clock by far")
}
