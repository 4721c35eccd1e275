package watchdog_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// A live session's snapshot says when its rules would stop it if nothing
// more happened, and by which rule: left alone, the session is stopped at
// exactly that instant, by that rule, whatever it was doing before (silent,
// deferred by fresh evidence, waiting for a call in flight, halfway
// through its settle checks, with the idle rule in shadow mode).
func TestASnapshotForetellsTheEarliestStop(t *testing.T) {
	idle := watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second}
	for _, c := range []struct {
		name   string
		policy watchdog.Policy
		before func(s *watchdog.Session) // what happens before the snapshot
		rule   string
		after  time.Duration // from the start, the stop
	}{
		{"silent", idle, func(*watchdog.Session) { time.Sleep(time.Second) }, "idle", 25*time.Second + 1},
		{"fresh tool evidence defers it", idle, func(s *watchdog.Session) {
			time.Sleep(3 * time.Second)
			s.Touch(watchdog.ChannelMCPTool)
		}, "idle", 0},
		{"a call in flight until it is abandoned", idle, func(s *watchdog.Session) {
			_, err := watchdog.Begin(s.Context(), "hung", watchdog.CallLimits{Cap: 40 * time.Second})
			require.NoError(t, err)
			time.Sleep(2 * time.Second)
		}, "idle", 0},
		{"halfway through the settle checks", idle, func(*watchdog.Session) { time.Sleep(17 * time.Second) }, "idle", 25*time.Second + 1},
		{"stdout speaks, then silence", idle, func(s *watchdog.Session) {
			time.Sleep(4 * time.Second)
			s.Touch(watchdog.ChannelStdout)
			time.Sleep(time.Second)
		}, "idle", 0},
		{"the idle rule in shadow mode", watchdog.Policy{WallClock: time.Minute, IdleWindow: 5 * time.Second,
			RuleModes: map[string]watchdog.Mode{"idle": watchdog.ModeShadow}}, func(*watchdog.Session) { time.Sleep(time.Second) }, "wall_clock", 0},
		{"the session ceiling", watchdog.Policy{WallClock: time.Hour, SessionCeiling: 30 * time.Second},
			func(*watchdog.Session) {}, "session_ceiling", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := watchdog.NewMemoryStore()
				w := watchdog.New(watchdog.WithStore(store))
				start := time.Now()
				s, err := w.Start(ctx, "agent", start, c.policy)
				require.NoError(t, err)
				c.before(s)
				sn := s.Snapshot()
				require.True(t, sn.Running)
				require.Equal(t, c.rule, sn.StopRule)
				require.False(t, sn.StopAt.IsZero())
				if c.after != 0 {
					assert.Equal(t, c.after, sn.StopAt.Sub(start), "stop at")
				}
				<-s.Context().Done()
				synctest.Wait()
				var decision *watchdog.Event
				for _, e := range load(t, store, "agent") {
					if e.Kind == watchdog.KindDecision && e.Mode == watchdog.ModeAct {
						decision = &e
					}
				}
				require.NotNil(t, decision)
				assert.Equal(t, c.rule, decision.Rule)
				assert.True(t, decision.OccurredAt.Equal(sn.StopAt), "stopped at %v, foretold %v", decision.OccurredAt.Sub(start), sn.StopAt.Sub(start))
				after := s.Snapshot()
				assert.False(t, after.Running)
				assert.True(t, after.StopAt.IsZero())
				require.NoError(t, w.Close(ctx))
			})
		})
	}
}

// A snapshot holds each channel's last evidence, age and counter, and the
// calls in flight with their limits; its JSON is an object an operator's
// view reads.
func TestASnapshotShowsEvidenceAndCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := watchdog.New()
		start := time.Now()
		s, err := w.Start(ctx, "agent", start, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		s.Touch(watchdog.ChannelStdout)
		time.Sleep(2 * time.Second)
		h, err := watchdog.Begin(s.Context(), "search", watchdog.CallLimits{Cap: time.Minute, Idle: 10 * time.Second, Channel: watchdog.ChannelSubagent})
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		watchdog.Progress(h.Context(), 7)
		time.Sleep(time.Second)
		sn := s.Snapshot()
		assert.Equal(t, "agent", sn.SessionID)
		assert.Equal(t, 1, sn.Window)
		assert.True(t, sn.At.Equal(start.Add(6*time.Second)))
		assert.True(t, sn.Deadline.Equal(start.Add(time.Hour)))
		byName := map[string]watchdog.EvidenceEntry{}
		for _, e := range sn.Evidence {
			byName[e.Channel] = e
		}
		require.NotNil(t, byName["stdout"].LastAt)
		assert.Equal(t, 6*time.Second, sn.At.Sub(*byName["stdout"].LastAt), "stdout's age")
		assert.Equal(t, uint64(2), byName["subagent"].Counter) // begin, progress
		assert.Equal(t, time.Second, sn.At.Sub(*byName["subagent"].LastAt))
		assert.Nil(t, byName["workspace"].LastAt)
		require.Len(t, sn.Calls, 1)
		assert.Equal(t, 1, sn.CallsInFlight)
		assert.Equal(t, "search", sn.Calls[0].Name)
		assert.Equal(t, uint64(7), sn.Calls[0].Progress)
		assert.True(t, sn.Calls[0].ProgressAt.Equal(start.Add(5*time.Second)))

		b, err := json.Marshal(sn)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		for _, k := range []string{"session_id", "window", "at", "deadline", "running", "evidence", "calls", "calls_in_flight", "stop_at", "stop_rule"} {
			assert.Contains(t, m, k)
		}
		require.NoError(t, h.End(nil))
		require.NoError(t, w.Close(ctx))
	})
}

// Reading a session never waits for the store: a snapshot taken while the
// store hangs on an append returns at once.
func TestASnapshotDoesNotWaitForAHungStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		hung := newHungStore()
		w := watchdog.New(watchdog.WithStore(hung))
		s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second})
		require.NoError(t, err)
		hung.setHang()
		time.Sleep(time.Minute) // verdicts queue behind the hung append
		synctest.Wait()
		sn := s.Snapshot()
		assert.Equal(t, "agent", sn.SessionID)
		close(hung.release)
		require.NoError(t, w.Close(ctx))
		_ = s
	})
}
