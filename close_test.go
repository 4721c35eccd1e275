package watchdog_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

func TestCloseNamesEveryEventItCouldNotRecord(t *testing.T) {
	mock := newMock()
	store := newFaultyStore(1 << 30)
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w.Start(context.Background(), "doomed", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	advance(t, mock, 2*time.Second, w)
	err = w.Close(context.Background())
	require.ErrorIs(t, err, watchdog.ErrNotRecorded)
	require.ErrorIs(t, err, errStoreDown)
	assert.Contains(t, err.Error(), `runtime.watchdog.start session "doomed" window 1`)
	assert.Contains(t, err.Error(), `runtime.watchdog.cancel session "doomed" window 1`)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
	require.Equal(t, err, w.Close(context.Background()), "a second Close returns the first one's result")
}

func TestCloseCancelsLiveSessionsWithoutATerminalEvent(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w.Close(context.Background()))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrClosed)
	require.ErrorIs(t, s.Stop(), watchdog.ErrClosed)
	assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store, "s")))
}

func TestCallsAfterCloseGetErrClosed(t *testing.T) {
	w := watchdog.New(watchdog.WithClock(newMock()))
	require.NoError(t, w.Close(context.Background()))
	ctx := context.Background()
	_, err := w.Start(ctx, "s", t0, watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrClosed)
	_, err = w.Resume(ctx, "s", watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrClosed)
	_, err = w.Run(ctx, "s", watchdog.Policy{}, func(context.Context) error { return nil })
	require.ErrorIs(t, err, watchdog.ErrClosed)
	require.ErrorIs(t, w.Check(ctx), watchdog.ErrClosed)
	require.NoError(t, w.Close(ctx))
}

// Close(ctx) stops waiting for an action that ignores its context when ctx
// ends, and its error says an action is still running: a host shutting down
// keeps its own deadline even when an action hangs. The time is the synctest
// bubble's, so the test is exact.
func TestCloseHonoursItsContextWhileAnActionBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unblock, entered := make(chan struct{}), make(chan struct{})
		w := watchdog.New(watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
			close(entered)
			<-unblock // waits for the agent to shut down, ignoring ctx
			return nil
		}))
		_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = w.Close(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Contains(t, err.Error(), "still running")
		require.Equal(t, 200*time.Millisecond, time.Since(start))
		close(unblock)
		synctest.Wait()
	})
}

// An action stuck in user code that ignores its context uses up Close's
// deadline: Close's error names the action and nothing else (the scheduler,
// the recorder and the store are not stuck), and no goroutine of the
// Watchdog's outlives Close and the action. On the real clock (outside
// synctest): its timer is the one a stuck scheduler could leave armed.
func TestCloseNamesOnlyAStuckActionAndLeaksNothing(t *testing.T) {
	before := goroutines()
	unblock, entered := make(chan struct{}), make(chan struct{})
	w := watchdog.New(watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
		close(entered)
		<-unblock // ignores ctx
		return nil
	}))
	_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Millisecond})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the action did not start within 10s of a 1ms wall clock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = w.Close(ctx)
	close(unblock)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "still running in user code that ignores its context: an action or Wait callback")
	for _, innocent := range []string{"scheduler", "recorder", "Append", "OnSchedulerTick", "not recorded"} {
		assert.NotContains(t, err.Error(), innocent)
	}
	// The action's own goroutine ends once the action returns; nothing of
	// the Watchdog's outlives Close.
	deadline := time.Now().Add(5 * time.Second)
	for left := newWatchdogGoroutines(before); left != ""; left = newWatchdogGoroutines(before) {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of the Watchdog still running 5s after Close and the action returned:\n%s", left)
		}
		runtime.Gosched()
	}
}

// goroutines returns the stacks of every goroutine, by their header line
// ("goroutine 7 [select]:" without the state).
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		all[id] = g
	}
	return all
}

// newWatchdogGoroutines returns the stacks of the goroutines running the
// library's code that were not in before.
func newWatchdogGoroutines(before map[string]string) string {
	var left []string
	for id, g := range goroutines() {
		if _, old := before[id]; !old && (strings.Contains(g, "sessionwatchdog/watchdog.") ||
			strings.Contains(g, "sessionwatchdog/watchdog/internal/")) && !strings.Contains(g, "watchdog_test.") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}
