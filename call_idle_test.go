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

// progressingCall runs CallWith in a goroutine with a function that reports
// each value sent on the returned channel as progress (the reply says
// whether it counted) until its context ends.
func progressingCall(t *testing.T, ctx context.Context, idle, limit time.Duration) (report func(uint64) bool, res <-chan error) {
	return progressingCallWith(t, ctx, watchdog.CallLimits{Cap: limit, Idle: idle})
}

// progressingCallWith is progressingCall under the limits l.
func progressingCallWith(t *testing.T, ctx context.Context, l watchdog.CallLimits) (report func(uint64) bool, res <-chan error) {
	values, counted := make(chan uint64), make(chan bool)
	out := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		out <- callWith(ctx, "build", l, func(ctx context.Context) error {
			defer watchdog.Step(ctx, "compile")()
			close(entered)
			for {
				select {
				case v := <-values:
					counted <- watchdog.Progress(ctx, v)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
	}()
	testwait.For(t, entered, "the call to be entered")
	return func(v uint64) bool {
		select {
		case values <- v:
		case <-time.After(testwait.Bound):
			t.Fatalf("waited %v for the call to take progress %d", testwait.Bound, v)
		}
		return testwait.For(t, counted, "the call to count a progress")
	}, out
}

func notYet(t *testing.T, res <-chan error, at string) {
	t.Helper()
	select {
	case err := <-res:
		t.Fatalf("the call ended at %s: %v", at, err)
	default:
	}
}

// Progress that advances pushes a call's idle deadline forward, call after
// call, but never its cap: a build reporting a step every 400 ms runs past
// its 500 ms idle budget and is stopped by its 3 s cap, whose record names
// the limit hit and the last progress.
func TestAdvancingProgressKeepsACallAlivePastItsIdleBudgetUntilItsCap(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	report, res := progressingCall(t, s.Context(), 500*time.Millisecond, 3*time.Second)
	for i := uint64(1); i <= 7; i++ {
		advance(t, mock, 400*time.Millisecond, w)
		notYet(t, res, mock.Now().Sub(t0).String())
		require.True(t, report(i))
	}
	advance(t, mock, 199*time.Millisecond, w)
	notYet(t, res, "2.999s")
	advance(t, mock, time.Millisecond, w)
	err = testwait.For(t, res, "the call's result")
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, "handler_deadline", v.Rule, "the cap, not the idle budget")
	assert.Equal(t, 3*time.Second, v.Elapsed)

	d := ofKind(load(t, store, "s"), watchdog.KindHandlerDeadline)
	require.Len(t, d, 1)
	assert.Equal(t, "handler_deadline", d[0].Rule)
	assert.Equal(t, "handler_deadline_exceeded", d[0].Reason)
	assert.Equal(t, "build", d[0].Handler)
	assert.Equal(t, "compile", d[0].DyingSpan)
	assert.Equal(t, uint64(7), d[0].ProgressValue)
	assert.Equal(t, t0.Add(2800*time.Millisecond), d[0].ProgressAt)
	mm, err := watchdog.Replay(load(t, store, "s"))
	require.NoError(t, err)
	assert.Empty(t, mm)
}

// A keep-alive that repeats the last value does not count: the call is
// stopped its idle budget after the last value that advanced, and the
// record says the idle limit was hit, with that value and its instant.
func TestAKeepAliveThatRepeatsItsValueDoesNotRefreshTheIdleDeadline(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	report, res := progressingCall(t, s.Context(), 500*time.Millisecond, 10*time.Second)
	advance(t, mock, 400*time.Millisecond, w)
	require.True(t, report(3))
	advance(t, mock, 300*time.Millisecond, w)
	require.False(t, report(3), "the same value again")
	require.False(t, report(2), "a smaller one")
	advance(t, mock, 199*time.Millisecond, w)
	notYet(t, res, "899ms")
	advance(t, mock, time.Millisecond, w)
	err = testwait.For(t, res, "the call's result")
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, "handler_idle", v.Rule)
	assert.Equal(t, 500*time.Millisecond, v.Elapsed, "time without progress")
	assert.Equal(t, 500*time.Millisecond, v.Budget)
	assert.Equal(t, "compile", v.DyingSpan)

	evs := load(t, store, "s")
	d := ofKind(evs, watchdog.KindHandlerDeadline)
	require.Len(t, d, 1)
	assert.Equal(t, "handler_idle", d[0].Rule)
	assert.Equal(t, "handler_idle_exceeded", d[0].Reason)
	assert.Equal(t, uint64(3), d[0].ProgressValue)
	assert.Equal(t, t0.Add(400*time.Millisecond), d[0].ProgressAt)
	assert.Equal(t, t0.Add(900*time.Millisecond), d[0].OccurredAt)
	assert.InDelta(t, 0.5, d[0].MeasureSeconds, 1e-9)
	assert.InDelta(t, 0.5, d[0].LimitSeconds, 1e-9)
	mm, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mm)
	require.NoError(t, s.Context().Err(), "a call's verdict is not the session's")
}

// A call that never reports progress is stopped its idle budget after it
// started, long before its cap; its record has no progress.
func TestASilentCallIsStoppedAtItsIdleBudgetFromItsStart(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	_, res := progressingCall(t, s.Context(), time.Second, time.Minute)
	advance(t, mock, 999*time.Millisecond, w)
	notYet(t, res, "999ms")
	advance(t, mock, time.Millisecond, w)
	var v *watchdog.VerdictError
	require.ErrorAs(t, testwait.For(t, res, "the call's result"), &v)
	assert.Equal(t, "handler_idle", v.Rule)
	d := ofKind(load(t, store, "s"), watchdog.KindHandlerDeadline)
	require.Len(t, d, 1)
	assert.Zero(t, d[0].ProgressValue)
	assert.True(t, d[0].ProgressAt.IsZero())
}

// Without a session CallWith runs on real timers (here a synctest bubble's):
// advancing progress keeps the call alive, and silence ends it.
func TestCallWithWithoutASessionRunsOnRealTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		err := callWith(context.Background(), "stream", watchdog.CallLimits{Cap: time.Hour, Idle: time.Second}, func(ctx context.Context) error {
			for i := uint64(1); i <= 5; i++ {
				time.Sleep(900 * time.Millisecond)
				if !watchdog.Progress(ctx, i) {
					t.Errorf("progress %d did not count", i)
				}
			}
			<-ctx.Done() // then silent
			return ctx.Err()
		})
		var v *watchdog.VerdictError
		require.ErrorAs(t, err, &v)
		assert.Equal(t, "handler_idle", v.Rule)
		assert.Equal(t, 5*900*time.Millisecond+time.Second, time.Since(begin))
	})
}

// Bad input to CallWith is an error naming it; Progress outside a call
// counts nothing.
func TestCallWithRefusesBadBudgetsAndProgressOutsideACallCountsNothing(t *testing.T) {
	fn := func(context.Context) error { return nil }
	require.ErrorIs(t, callWith(context.Background(), "x", watchdog.CallLimits{Cap: time.Second, Idle: -1}, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, callWith(context.Background(), "x", watchdog.CallLimits{Cap: time.Second, FirstProgress: -1}, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, callWith(context.Background(), "x", watchdog.CallLimits{Idle: time.Second}, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, callWith(context.Background(), "x", watchdog.CallLimits{Cap: time.Second}, nil), watchdog.ErrInvalidArgument)
	assert.False(t, watchdog.Progress(context.Background(), 1))
	var nilCtx context.Context
	assert.False(t, watchdog.Progress(nilCtx, 1))
}

// Replay re-derives an idle fire from the recorded instant of the last
// progress: a record that fired too soon after it is reported.
func TestReplayRederivesACallsIdleFireFromItsLastProgress(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	report, res := progressingCall(t, s.Context(), 500*time.Millisecond, time.Minute)
	advance(t, mock, 100*time.Millisecond, w)
	require.True(t, report(1))
	advance(t, mock, 500*time.Millisecond, w)
	require.Error(t, testwait.For(t, res, "the call's result"))
	evs := load(t, store, "s")
	mm, err := watchdog.Replay(evs)
	require.NoError(t, err)
	require.Empty(t, mm)
	for i := range evs {
		if evs[i].Kind == watchdog.KindHandlerDeadline {
			evs[i].ProgressAt = evs[i].ProgressAt.Add(100 * time.Millisecond) // progress later than recorded
		}
	}
	mm, err = watchdog.Replay(evs)
	require.NoError(t, err)
	require.Len(t, mm, 1)
}

// A first-progress limit gives a call (a reasoning model thinking before
// its first token) longer until its first progress than between later
// ones; it counts from the call's start.
func TestAFirstProgressLimitAppliesUntilTheFirstProgressOnly(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	l := watchdog.CallLimits{Cap: time.Minute, Idle: time.Second, FirstProgress: 10 * time.Second}
	report, res := progressingCallWith(t, s.Context(), l)
	advance(t, mock, 9*time.Second, w)
	notYet(t, res, "9s: thinking")
	require.True(t, report(1))
	advance(t, mock, 999*time.Millisecond, w)
	notYet(t, res, "9.999s")
	advance(t, mock, time.Millisecond, w)
	var v *watchdog.VerdictError
	require.ErrorAs(t, testwait.For(t, res, "the call's result"), &v)
	assert.Equal(t, "handler_idle", v.Rule)
	assert.Equal(t, time.Second, v.Budget, "the idle limit after the first progress")

	// Silent from the start: the first-progress limit fires.
	_, res = progressingCallWith(t, s.Context(), l)
	advance(t, mock, 9999*time.Millisecond, w)
	notYet(t, res, "9.999s without a first progress")
	advance(t, mock, time.Millisecond, w)
	require.ErrorAs(t, testwait.For(t, res, "the call's result"), &v)
	assert.Equal(t, 10*time.Second, v.Budget)
}

// The first progress switches a call from its first-progress limit to a
// shorter idle limit at once: silence after it ends the call its idle
// limit later, not at the first-progress limit.
func TestAfterTheFirstProgressTheShorterIdleLimitAppliesAtOnce(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	report, res := progressingCallWith(t, s.Context(), watchdog.CallLimits{Cap: time.Minute, Idle: time.Second, FirstProgress: 30 * time.Second})
	advance(t, mock, time.Second, w)
	require.True(t, report(1))
	advance(t, mock, 999*time.Millisecond, w)
	notYet(t, res, "1.999s")
	advance(t, mock, time.Millisecond, w)
	var v *watchdog.VerdictError
	require.ErrorAs(t, testwait.For(t, res, "the call's result"), &v)
	assert.Equal(t, "handler_idle", v.Rule)
	assert.Equal(t, time.Second, v.Budget)

	// The same on real timers, without a session.
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		err := callWith(context.Background(), "llm", watchdog.CallLimits{Cap: time.Minute, Idle: time.Second, FirstProgress: 30 * time.Second}, //watchdog:unbounded on purpose: the same call without a session, on real timers
			func(ctx context.Context) error {
				time.Sleep(time.Second)
				watchdog.Progress(ctx, 1)
				<-ctx.Done()
				return ctx.Err()
			})
		require.ErrorAs(t, err, &v)
		assert.Equal(t, 2*time.Second, time.Since(begin))
	})
}

// Progress of an inner call is progress of the calls enclosing it: an
// outer call with a 1 s idle limit lives on while its inner call reports
// progress every 500 ms. Once a call has returned, its Progress counts no
// more (a goroutine it left behind keeps nothing alive).
func TestProgressReachesEnclosingCallsAndStopsWithItsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inner context.Context
		err := callWith(context.Background(), "outer", watchdog.CallLimits{Cap: time.Hour, Idle: time.Second}, func(ctx context.Context) error {
			return callWith(ctx, "inner", watchdog.CallLimits{Cap: time.Hour, Idle: time.Minute}, func(ctx context.Context) error {
				inner = ctx
				for i := uint64(1); i <= 10; i++ {
					time.Sleep(500 * time.Millisecond)
					if !watchdog.Progress(ctx, i) {
						t.Errorf("progress %d did not count", i)
					}
				}
				return nil
			})
		})
		require.NoError(t, err, "the outer call saw the inner progress")
		assert.False(t, watchdog.Progress(inner, 11), "the call has returned")
	})
}
