package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Stepping the wall clock forward an hour, one second into a 30-minute
// session, does not end it: the budget is elapsed time. It ends 30 minutes
// after its start, and the record is on the stepped wall clock with every
// instant shifted together, so elapsed_seconds is the true 1800 s and the
// log still replays.
func TestAWallClockStepForwardDoesNotEndASessionEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		defer w.Close(context.Background())
		start := time.Now()
		s, err := w.Start(context.Background(), "s", start, watchdog.Policy{WallClock: 30 * time.Minute})
		require.NoError(t, err)

		time.Sleep(time.Second)
		watchdog.StepWallClock(w, time.Hour)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.NoError(t, s.Context().Err(), "a session was stopped by a step of the wall clock")
		s.Touch(watchdog.ChannelWorkspace) // at 3 s: recorded on the stepped clock
		assert.Equal(t, start.Add(time.Hour).UTC(), s.StartedAt(), "the API speaks the stepped wall clock")

		<-s.Context().Done()
		assert.Equal(t, 30*time.Minute+time.Nanosecond, time.Since(start), "fired when its budget of elapsed time ran out")
		synctest.Wait()
		evs := load(t, store, "s")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		c := evs[2]
		assert.Equal(t, 1800.000000001, c.ElapsedSeconds)
		assert.Equal(t, start.Add(time.Hour+30*time.Minute+1).UTC(), c.OccurredAt, "recorded on the stepped wall clock")
		assert.Equal(t, start.Add(time.Hour).UTC(), c.WindowStartedAt, "shifted with the other instants")
		assert.Equal(t, c.OccurredAt, c.FiredAt)
		d := evs[1]
		ws := entry(t, c, "workspace").LastAt
		require.NotNil(t, ws)
		assert.Equal(t, *entry(t, d, "workspace").LastAt, *ws, "the summary the decision and the cancel share is shifted once")
		assert.False(t, ws.Before(start.Add(time.Hour+3*time.Second)), "never earlier than the touch, on the stepped clock")
		assert.True(t, ws.Before(start.Add(time.Hour+4*time.Second)))
		mismatches, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mismatches)
	})
}

// Stepping the wall clock back an hour right after the start leaves neither
// the budget nor the idle rule off for that hour.
func TestAWallClockStepBackLeavesNoRuleOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New()
		defer w.Close(context.Background())
		start := time.Now()
		budget, err := w.Start(context.Background(), "budget", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		idle, err := w.Start(context.Background(), "idle", start, watchdog.Policy{
			WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		})
		require.NoError(t, err)
		watchdog.StepWallClock(w, -time.Hour)

		<-budget.Context().Done()
		assert.Equal(t, time.Second+time.Nanosecond, time.Since(start))
		require.ErrorIs(t, context.Cause(budget.Context()), watchdog.ErrWallClockExceeded)
		<-idle.Context().Done()
		assert.Equal(t, 10*time.Second+time.Nanosecond, time.Since(start))
		require.ErrorIs(t, context.Cause(idle.Context()), watchdog.ErrIdleExceeded)
	})
}

// A Resume in another process after a step reads the start back from the
// latest events, which were recorded on the stepped clock: the budget left
// is the true one, not an hour short.
func TestAResumeAfterAWallClockStepKeepsTheTrueBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w1 := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		p := watchdog.Policy{WallClock: 2 * time.Hour, LivenessRules: []string{"probe"}}
		s, err := w1.Start(context.Background(), "s", start, p)
		require.NoError(t, err)
		time.Sleep(10 * time.Minute)
		watchdog.StepWallClock(w1, time.Hour)
		_, err = s.ReportLiveness("probe", true) // an event recorded after the step
		require.NoError(t, err)
		time.Sleep(10 * time.Minute)
		require.NoError(t, w1.Close(context.Background())) // the process goes; the window stays open

		w2 := watchdog.New(watchdog.WithStore(store))
		defer w2.Close(context.Background())
		watchdog.StepWallClock(w2, time.Hour) // the new process reads the stepped clock from its start
		r, err := w2.Resume(context.Background(), "s", p)
		require.NoError(t, err)
		assert.Equal(t, start.Add(time.Hour+2*time.Hour).UTC(), r.Deadline().UTC(), "2 h after the start, on the stepped clock")
		<-r.Context().Done()
		assert.Equal(t, 2*time.Hour+time.Nanosecond, time.Since(start))
	})
}

// A Watchdog that sees its wall clock stepped back an hour and closes
// cleanly, whether or not it recorded anything after the step: the next
// process, on the stepped clock, resumes the window with its true budget.
// Before the fix, with nothing recorded after the step, the restart read
// the start on the old clock and fired an hour late.
func TestAStepBackBeforeACleanCloseDoesNotDelayTheResumedWindow(t *testing.T) {
	for _, recordedAfter := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing recorded after the step", true: "an event recorded after the step"}[recordedAfter], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := watchdog.NewMemoryStore()
				w1 := watchdog.New(watchdog.WithStore(store))
				start := time.Now()
				p := watchdog.Policy{WallClock: 2 * time.Hour, LivenessRules: []string{"probe"}}
				s, err := w1.Start(context.Background(), "s", start, p)
				require.NoError(t, err)
				time.Sleep(10 * time.Minute)
				watchdog.StepWallClock(w1, -time.Hour)
				time.Sleep(time.Minute)
				if recordedAfter {
					_, err = s.ReportLiveness("probe", true)
					require.NoError(t, err)
				} else {
					s.Touch(watchdog.ChannelWorkspace) // evidence, but no record
				}
				time.Sleep(9 * time.Minute)
				require.NoError(t, w1.Close(context.Background()))

				w2 := watchdog.New(watchdog.WithStore(store))
				defer w2.Close(context.Background())
				watchdog.StepWallClock(w2, -time.Hour)
				r, err := w2.Resume(context.Background(), "s", p)
				require.NoError(t, err)
				assert.Equal(t, start.Add(-time.Hour+2*time.Hour).UTC(), r.Deadline().UTC(), "2 h after the start, on the stepped clock")
				<-r.Context().Done()
				assert.Equal(t, 2*time.Hour+time.Nanosecond, time.Since(start), "fired when the budget of elapsed time ran out")
				require.NoError(t, w2.Check(context.Background())) // the cancel recorded
				mismatches, err := watchdog.Replay(load(t, store, "s"))
				require.NoError(t, err)
				assert.Empty(t, mismatches)
			})
		})
	}
}
