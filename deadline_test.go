package watchdog_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// callAsync runs watchdog.Call in a goroutine and returns its result channel.
func callAsync(ctx context.Context, name string, budget time.Duration, fn func(context.Context) error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- watchdog.Call(ctx, name, budget, fn) }()
	return out
}

// A handler that sleeps forever ignoring its context returns
// ErrDeadlineExceeded at its budget + grace; the event names the
// dying step; the abandoned goroutine is counted.
func TestHandlerIgnoringItsContextIsAbandonedAtBudgetPlusGrace(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{HandlerGrace: time.Second})
	require.NoError(t, err)

	stuck, entered := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	res := callAsync(s.Context(), "web_search", 2*time.Second, func(ctx context.Context) error {
		defer watchdog.Step(ctx, "resolve")()
		end := watchdog.Step(ctx, "http_get") // nested step: the innermost dies
		defer end()
		close(entered)
		<-stuck // ignores ctx
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 2*time.Second, w)
	select {
	case err := <-res:
		t.Fatalf("returned before the grace ended: %v", err)
	default:
	}
	advance(t, mock, time.Second, w)
	err = testwait.For(t, res, "the call's result")
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	require.NotErrorIs(t, err, watchdog.ErrWallClockExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, watchdog.LayerHandler, v.Layer)
	assert.Equal(t, "web_search", v.Name)
	assert.Equal(t, "http_get", v.DyingSpan)
	assert.Equal(t, 2*time.Second, v.Elapsed)
	st := w.Stats()
	abandoned, running := st.AbandonedHandlers, st.AbandonedRunning
	assert.Equal(t, int64(1), abandoned)
	assert.Equal(t, int64(1), running)
	require.NoError(t, s.Context().Err(), "a handler overrun is not a session verdict")

	evs := load(t, store, "s")
	d := ofKind(evs, watchdog.KindHandlerDeadline)
	require.Len(t, d, 1)
	assert.Equal(t, "web_search", d[0].Handler)
	assert.Equal(t, "handler", d[0].Layer)
	assert.Equal(t, "http_get", d[0].DyingSpan)
	assert.Equal(t, 2.0, d[0].LimitSeconds)
	assert.Equal(t, 2.0, d[0].MeasureSeconds)
	assert.Equal(t, "s", d[0].AggregateID)
	assert.Equal(t, t0.Add(2*time.Second), d[0].OccurredAt)
	a := ofKind(evs, watchdog.KindHandlerAbandoned)
	require.Len(t, a, 1)
	assert.Equal(t, t0.Add(3*time.Second), a[0].OccurredAt)
}

func TestCooperativeHandlerGetsTheDeadlineErrorOnTime(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	entered := make(chan struct{})
	res := callAsync(s.Context(), "model", time.Second, func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err() // even a plain context error becomes the deadline error
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, time.Second, w)
	require.ErrorIs(t, testwait.For(t, res, "the call's result"), watchdog.ErrDeadlineExceeded)
	abandoned := w.Stats().AbandonedHandlers
	assert.Zero(t, abandoned)

	// A handler that finishes in time returns its own result.
	boom := errors.New("boom")
	require.ErrorIs(t, watchdog.Call(s.Context(), "quick", time.Second, func(context.Context) error { return boom }), boom)
	require.NoError(t, watchdog.Call(s.Context(), "quick", time.Second, func(context.Context) error { return nil }))
}

// Layers compose: the innermost deadline wins and the cause names the layer.
func TestNestedLayersTheEarliestDeadlineFiresAndNamesItsLayer(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{PhaseBudgets: map[string]time.Duration{"build": 5 * time.Second}})
	require.NoError(t, err)

	run := func(handlerBudget time.Duration) error {
		entered := make(chan struct{})
		res := make(chan error, 1)
		go func() {
			res <- watchdog.Within(s.Context(), watchdog.LayerPhase, "build", 0, func(ctx context.Context) error {
				return watchdog.Within(ctx, watchdog.LayerIteration, "iter-1", 3*time.Second, func(ctx context.Context) error {
					return watchdog.Call(ctx, "compile", handlerBudget, func(ctx context.Context) error {
						close(entered)
						<-ctx.Done()
						return context.Cause(ctx)
					})
				})
			})
		}()
		testwait.For(t, entered, "the call to be entered")
		advance(t, mock, 6*time.Second, w)
		return testwait.For(t, res, "the call's result")
	}
	err = run(time.Second)
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	err = run(10 * time.Second) // the iteration's 3 s come first
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, watchdog.LayerIteration, v.Layer)
	assert.Equal(t, "iter-1", v.Name)
}

// A slow but bounded handler running longer than the idle window is
// not killed by the idle rule; a hung one is ended by its own deadline.
func TestBoundedHandlerDefersTheIdleRuleAndAHungOneDiesByItsOwnDeadline(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off,
		SettleChecks: 1, HandlerGrace: time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)

	// Slow (25 s, silent) but bounded (30 s budget).
	release, entered := make(chan struct{}), make(chan struct{})
	res := callAsync(s.Context(), "long_tool", 30*time.Second, func(ctx context.Context) error {
		close(entered)
		<-release
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 25*time.Second, w)
	require.NoError(t, s.Context().Err(), "bounded work is not idleness")
	close(release)
	require.NoError(t, testwait.For(t, res, "the call's result"))
	s.Touch(watchdog.ChannelStdout) // it prints its result
	v := ofKind(load(t, store, "s"), watchdog.KindVerdict)
	require.NotEmpty(t, v)
	assert.Equal(t, "handler", v[0].ActiveChannel)
	assert.Equal(t, 1, v[0].HandlersInFlight)

	// Hung: ignores its context. Its own deadline ends it at 30 s + 1 s
	// grace; then nothing justifies waiting and the idle rule acts.
	hung := make(chan struct{})
	defer close(hung)
	entered = make(chan struct{})
	res = callAsync(s.Context(), "hung_tool", 30*time.Second, func(ctx context.Context) error {
		close(entered)
		<-hung
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 30*time.Second, w)
	require.NoError(t, s.Context().Err())
	advance(t, mock, time.Second, w)
	require.ErrorIs(t, testwait.For(t, res, "the call's result"), watchdog.ErrDeadlineExceeded)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	evs := load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindHandlerDeadline), 1)
	assert.Len(t, ofKind(evs, watchdog.KindHandlerAbandoned), 1)
}

func TestWithinRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	var nilCtx context.Context
	require.ErrorIs(t, watchdog.Call(ctx, "x", 0, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, watchdog.Call(ctx, "x", -time.Second, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, watchdog.Call(ctx, "x", time.Second, nil), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, watchdog.Call(nilCtx, "x", time.Second, fn), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, watchdog.Within(ctx, "galaxy", "x", time.Second, fn), watchdog.ErrInvalidArgument)
	require.NotPanics(t, func() { watchdog.Step(ctx, "outside any layer")() })
}

// Without a session a handler runs on the real clock: shown in a synctest
// bubble, where that clock is fake and the test exact.
func TestCallWithoutASessionUsesTheRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := watchdog.Call(context.Background(), "lonely", time.Second, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		stuck := make(chan struct{})
		start = time.Now()
		err = watchdog.Call(context.Background(), "stuck", time.Second, func(ctx context.Context) error {
			<-stuck
			return nil
		})
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		assert.Equal(t, time.Second+5*time.Second, time.Since(start))
		close(stuck)
	})
}

// The instant a handler returns is not taken for silence: its end is
// tool-call evidence, recorded before the idle rule looks again.
func TestTheEndOfAHandlerIsEvidenceForTheIdleRule(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, EvidenceTTL: 500 * time.Millisecond, SettleChecks: 1}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)
	release, entered := make(chan struct{}), make(chan struct{})
	res := callAsync(s.Context(), "slow_tool", 5*time.Second, func(ctx context.Context) error {
		close(entered)
		<-release
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	advance(t, mock, 1300*time.Millisecond, w) // longer than the idle window
	close(release)
	require.NoError(t, testwait.For(t, res, "the call's result"))
	require.NoError(t, w.Check(context.Background()))
	require.NoError(t, s.Context().Err(), "not cut the instant the tool returned")
	s.Touch(watchdog.ChannelStdout) // the agent prints the tool's result
	advance(t, mock, 900*time.Millisecond, w)
	require.NoError(t, s.Context().Err())
	v := ofKind(load(t, store, "s"), watchdog.KindVerdict)
	require.NotEmpty(t, v)
	assert.Equal(t, "handler", v[0].ActiveChannel)
	assert.Equal(t, "mcp_tool", v[len(v)-1].ActiveChannel)
}

// Stats gives the handlers abandoned so far and those of them
// still running, not every running handler: a healthy handler within its
// budget is not counted, and an abandoned one leaves the running count when
// its function returns. That count is the leak a host can alert on. In a
// synctest bubble, synctest.Wait tells when the abandoned function's
// goroutine is really gone.
func TestAbandonedHandlersCountsOnlyAbandonedFunctionsStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := newMock()
		w := watchdog.New(watchdog.WithClock(mock))
		s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour, HandlerGrace: time.Second})
		require.NoError(t, err)
		release, entered := make(chan struct{}), make(chan struct{})
		abandoned := make(chan error, 1)
		go func() {
			abandoned <- watchdog.Call(s.Context(), "stuck", time.Second, func(ctx context.Context) error {
				close(entered)
				<-release
				return nil
			})
		}()
		<-entered
		require.NoError(t, watchdogtest.Advance(context.Background(), mock, 2*time.Second, w))
		require.ErrorIs(t, <-abandoned, watchdog.ErrDeadlineExceeded)
		st := w.Stats()
		a, running := st.AbandonedHandlers, st.AbandonedRunning
		assert.Equal(t, [2]int64{1, 1}, [2]int64{a, running})

		healthyRelease, healthyIn, healthyDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(healthyDone)
			_ = watchdog.Call(s.Context(), "healthy", time.Hour, func(ctx context.Context) error {
				close(healthyIn)
				<-healthyRelease
				return nil
			})
		}()
		<-healthyIn
		close(release) // the abandoned function returns
		synctest.Wait()
		st = w.Stats()
		a, running = st.AbandonedHandlers, st.AbandonedRunning
		assert.Equal(t, int64(1), a)
		assert.Equal(t, int64(0), running, "a healthy in-time handler is not counted")
		close(healthyRelease)
		<-healthyDone
		require.NoError(t, w.Close(context.Background()))
	})
}

// lateClock tells the time from now, but its timers are on dead and never
// fire on their own: the scheduler runs only when Check asks, that is late,
// as after a suspended laptop, a wall-clock step or a long GC pause.
type lateClock struct {
	now  *clock.Mock
	dead *clock.Mock
}

func (c lateClock) Now() time.Time                                   { return c.now.Now() }
func (c lateClock) AfterFunc(d time.Duration, f func()) *clock.Timer { return c.dead.AfterFunc(d, f) }

// A scheduler pass that runs late, after a handler's deadline and its grace
// have both passed (25 s after a 5 s deadline, grace 1 s), finishes: the
// idle rule, deferred while the handler's work was bounded, is looked at
// once more and the pass moves on. A pass that never finished would hold up
// every session of the Watchdog after the machine woke.
func TestALateSchedulerPassPastAHandlersGraceEnds(t *testing.T) {
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(lateClock{mock, clock.NewMock()}), watchdog.WithStore(watchdog.NewMemoryStore()))
	defer w.Close(context.Background())
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1, HandlerGrace: time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	go watchdog.Call(s.Context(), "slow", 5*time.Second, func(ctx context.Context) error {
		close(entered)
		<-release // ignores its context
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	mock.Add(30 * time.Second) // the scheduler wakes 25 s after the handler's deadline
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.Check(ctx), "scheduler pass never finished")
}

// A scheduler pass that runs late but within a handler's grace (25 s after
// a 5 s deadline, grace 1 min) finishes too, and promptly: the handler is
// past its deadline but not yet abandoned.
func TestALateSchedulerPassWithinAHandlersGraceEnds(t *testing.T) {
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(lateClock{mock, clock.NewMock()}), watchdog.WithStore(watchdog.NewMemoryStore()))
	defer w.Close(context.Background())
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1, HandlerGrace: time.Minute}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	go watchdog.Call(s.Context(), "slow", 5*time.Second, func(ctx context.Context) error {
		close(entered)
		<-release // ignores its context
		return nil
	})
	testwait.For(t, entered, "the call to be entered")
	mock.Add(30 * time.Second) // the scheduler wakes 25 s after the handler's deadline
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, w.Check(ctx), "scheduler pass never finished")
}
