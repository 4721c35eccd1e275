package watchdog_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// counter returns the evidence counter of channel ch in a snapshot.
func counter(t *testing.T, sn watchdog.Snapshot, ch string) uint64 {
	t.Helper()
	for _, e := range sn.Evidence {
		if e.Channel == ch {
			return e.Counter
		}
	}
	t.Fatalf("no channel %q in %+v", ch, sn.Evidence)
	return 0
}

// A tool call that begins in one event and ends in another, on two
// goroutines: the handle carries its context, whose deadline is the cap,
// its progress and its end; with call records on, a failed call is
// recorded as failed and a good one as ok.
func TestACallBegunOnOneGoroutineEndsOnAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, s, store := agentSession(t, watchdog.Policy{WallClock: time.Hour}, watchdog.WithCallRecords(10))

		begun := make(chan *watchdog.CallHandle)
		go func() { // the tool_use event
			h, err := watchdog.Begin(s.Context(), "search", watchdog.CallLimits{Cap: time.Minute})
			assert.NoError(t, err)
			begun <- h
		}()
		h := <-begun
		d, ok := h.Context().Deadline()
		require.True(t, ok, "the call's deadline is visible through its context")
		assert.True(t, d.Equal(time.Now().Add(time.Minute)), "deadline %v", d)
		time.Sleep(time.Second)
		assert.True(t, watchdog.Progress(h.Context(), 1))
		ended := make(chan error)
		go func() { ended <- h.End(errors.New("tool failed")) }() // the tool_result event
		require.EqualError(t, <-ended, "tool failed")
		require.ErrorIs(t, h.Context().Err(), context.Canceled, "an ended call's context is done")

		h2, err := watchdog.Begin(s.Context(), "fetch", watchdog.CallLimits{Cap: time.Minute})
		require.NoError(t, err)
		require.NoError(t, h2.End(nil))
		require.NoError(t, s.Stop())
		synctest.Wait()

		var reasons []string
		for _, e := range load(t, store, "agent") {
			if e.Kind == watchdog.KindCallCompleted {
				reasons = append(reasons, e.Handler+":"+e.Reason+":"+e.Error)
			}
		}
		assert.Equal(t, []string{"search:error:tool failed", "fetch:ok:"}, reasons)
		require.NoError(t, w.Close(ctx))
	})
}

// Nothing of the library runs while calls are in flight: beginning a
// thousand of them starts no goroutine.
func TestCallsInFlightRunNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, s, _ := agentSession(t, watchdog.Policy{WallClock: time.Hour})
		synctest.Wait()
		before := runtime.NumGoroutine()
		hs := make([]*watchdog.CallHandle, 1000)
		for i := range hs {
			var err error
			hs[i], err = watchdog.Begin(s.Context(), "tool", watchdog.CallLimits{Cap: time.Minute, Idle: time.Second})
			require.NoError(t, err)
		}
		synctest.Wait()
		assert.LessOrEqual(t, runtime.NumGoroutine(), before, "no goroutine per call (other tests' leftovers may end meanwhile)")
		assert.Equal(t, 1000, s.Snapshot().CallsInFlight)
		for _, h := range hs {
			require.NoError(t, h.End(nil))
		}
		assert.Equal(t, 0, s.Snapshot().CallsInFlight)
		require.NoError(t, w.Close(ctx))
	})
}

// A call past its cap has its context cancelled with the verdict at the
// cap, and its End returns the verdict, not the tool's own result; a
// second End records nothing more and returns the same.
func TestACallPastItsCapEndsWithTheVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, s, store := agentSession(t, watchdog.Policy{WallClock: time.Hour}, watchdog.WithCallRecords(10))
		h, err := watchdog.Begin(s.Context(), "search", watchdog.CallLimits{Cap: 10 * time.Second})
		require.NoError(t, err)
		start := time.Now()
		<-h.Context().Done()
		assert.Equal(t, 10*time.Second, time.Since(start))
		var v *watchdog.VerdictError
		require.ErrorAs(t, context.Cause(h.Context()), &v)
		assert.Equal(t, "handler_deadline", v.Rule)
		err = h.End(nil)
		require.ErrorAs(t, err, &v)
		require.ErrorIs(t, h.End(errors.New("late")), watchdog.ErrDeadlineExceeded)
		require.NoError(t, s.Stop())
		synctest.Wait()
		evs := load(t, store, "agent")
		assert.Equal(t, 1, countKind(evs, watchdog.KindHandlerDeadline))
		assert.Equal(t, 1, countKind(evs, watchdog.KindCallCompleted))
		require.NoError(t, w.Close(ctx))
	})
}

// A handle that is never ended is abandoned at its cap plus the grace,
// recorded, and no longer holds back the session's idle rule.
func TestAHandleNeverEndedIsAbandonedAfterTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		p := watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, EvidenceTTL: time.Second, SettleChecks: 1, HandlerGrace: 2 * time.Second}
		s, err := w.Start(ctx, "agent", time.Now(), p)
		require.NoError(t, err)
		start := time.Now()
		_, err = watchdog.Begin(s.Context(), "hung", watchdog.CallLimits{Cap: 10 * time.Second})
		require.NoError(t, err)
		<-s.Context().Done()
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
		assert.Equal(t, 12*time.Second, time.Since(start), "stopped when the call was abandoned")
		synctest.Wait()
		evs := load(t, store, "agent")
		assert.Equal(t, 1, countKind(evs, watchdog.KindHandlerAbandoned))
		assert.Equal(t, int64(1), w.Stats().AbandonedHandlers)
		require.NoError(t, w.Close(ctx))
	})
}

// A call's begin, progress and end are evidence on the channel it chose:
// a sub-agent's on subagent, a user's on their own; a channel the session
// lacks is refused by name.
func TestACallChoosesItsEvidenceChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, s, _ := agentSession(t, watchdog.Policy{WallClock: time.Hour, Channels: []string{"browser"}})
		browser, err := s.Channel("browser")
		require.NoError(t, err)
		for _, c := range []struct {
			ch   watchdog.Channel
			name string
		}{{watchdog.ChannelSubagent, "subagent"}, {browser, "browser"}, {0, "mcp_tool"}} {
			before := s.Snapshot()
			h, err := watchdog.Begin(s.Context(), "call", watchdog.CallLimits{Cap: time.Minute, Channel: c.ch})
			require.NoError(t, err)
			require.True(t, watchdog.Progress(h.Context(), 1))
			require.NoError(t, h.End(nil))
			after := s.Snapshot()
			for _, ch := range []string{"stdout", "mcp_tool", "subagent", "workspace", "browser"} {
				want := uint64(0)
				if ch == c.name {
					want = 3 // begin, progress, end
				}
				assert.Equal(t, want, counter(t, after, ch)-counter(t, before, ch), "a call on %s: evidence on %s", c.name, ch)
			}
		}
		_, err = watchdog.Begin(s.Context(), "call", watchdog.CallLimits{Cap: time.Minute, Channel: 9})
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.ErrorContains(t, err, "no evidence channel 9")
		require.NoError(t, w.Close(ctx))
	})
}

// A verdict lists at most 100 calls in flight, the oldest, and counts
// them all; the list of the 150 calls of this session stays small.
func TestAVerdictListsTheOldest100CallsInFlightAndCountsThemAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w, s, store := agentSession(t, watchdog.Policy{WallClock: 30 * time.Second, IdleWindow: time.Second})
		var hs []*watchdog.CallHandle
		for i := range 150 {
			h, err := watchdog.Begin(s.Context(), "call", watchdog.CallLimits{Cap: time.Hour})
			require.NoError(t, err)
			hs = append(hs, h)
			if i == 0 {
				time.Sleep(time.Millisecond) // the first is the oldest
			}
		}
		<-s.Context().Done()
		synctest.Wait()
		var decision *watchdog.Event
		for _, e := range load(t, store, "agent") {
			if e.Kind == watchdog.KindDecision {
				decision = &e
			}
		}
		require.NotNil(t, decision)
		assert.Equal(t, 150, decision.HandlersInFlight)
		require.Len(t, decision.CallsInFlight, 100)
		assert.True(t, decision.CallsInFlight[0].StartedAt.Before(decision.CallsInFlight[1].StartedAt), "oldest first")
		for _, h := range hs {
			_ = h.End(nil)
		}
		require.NoError(t, w.Close(ctx))
	})
}

// Begin refuses what cannot be a call, and a closed Watchdog.
func TestBeginRefusesBadLimitsAndAClosedWatchdog(t *testing.T) {
	ctx := context.Background()
	w := watchdog.New()
	s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{})
	require.NoError(t, err)
	for _, l := range []watchdog.CallLimits{{}, {Cap: -1}, {Cap: time.Second, Idle: -1}, {Cap: time.Second, FirstProgress: -1}} {
		_, err := watchdog.Begin(s.Context(), "x", l)
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument, "%+v", l)
	}
	_, err = watchdog.Begin(s.Context(), "", watchdog.CallLimits{Cap: time.Second})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	require.NoError(t, w.Close(ctx))
	_, err = watchdog.Begin(s.Context(), "x", watchdog.CallLimits{Cap: time.Second})
	require.ErrorIs(t, err, watchdog.ErrClosed)
}

// A call ended at the very instant its cap fires gets one story: when End
// returns the verdict, the call's context has the verdict as its cause
// too, whichever of the end and the scheduler's cancel came first.
func TestACallEndedAtItsCapHasTheVerdictAsItsContextsCause(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			w := watchdog.New()
			s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
			require.NoError(t, err)
			h, err := watchdog.Begin(s.Context(), "search", watchdog.CallLimits{Cap: time.Second})
			require.NoError(t, err)
			time.Sleep(time.Second)
			err = h.End(nil)
			var v *watchdog.VerdictError
			if errors.As(err, &v) {
				assert.Equal(t, err, context.Cause(h.Context()))
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, w.Close(ctx))
		})
	}
}

// agentSession starts session "agent" now, on a Watchdog with a memory
// store and opts: the setup of the handle and snapshot tests.
func agentSession(t *testing.T, p watchdog.Policy, opts ...watchdog.Option) (*watchdog.Watchdog, *watchdog.Session, *watchdog.MemoryStore) {
	t.Helper()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(append([]watchdog.Option{watchdog.WithStore(store)}, opts...)...)
	s, err := w.Start(context.Background(), "agent", time.Now(), p)
	require.NoError(t, err)
	return w, s, store
}
