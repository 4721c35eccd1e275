package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
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

				resumeOnTheSteppedClock(t, store, p, start)
				mismatches, err := watchdog.Replay(load(t, store, "s"))
				require.NoError(t, err)
				assert.Empty(t, mismatches)
			})
		})
	}
}

// userClock is a real-time Clock of the user's: the real clock, in a type
// of its own (the Watchdog reads it only when it needs the time).
type userClock struct{ clock.Clock }

// A step of a user's real-time Clock while a session is quiet (nothing
// reads the Clock between the step and Close) survives a clean Close: Close
// reads the Clock, sees the step and checkpoints the window on the stepped
// clock, so the restart fires it when its budget of elapsed time runs out,
// not an hour late.
func TestAUserClocksStepWhileQuietSurvivesACleanCloseAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(userClock{clock.New()}))
		start := time.Now()
		p := watchdog.Policy{WallClock: 2 * time.Hour}
		_, err := w1.Start(context.Background(), "s", start, p)
		require.NoError(t, err)
		time.Sleep(10 * time.Minute)
		watchdog.StepWallClock(w1, -time.Hour) // quiet from here to Close
		time.Sleep(10 * time.Minute)
		require.NoError(t, w1.Close(context.Background()))

		resumeOnTheSteppedClock(t, store, p, start, watchdog.WithClock(userClock{clock.New()}))
	})
}

// resumeOnTheSteppedClock restarts on store, on a wall clock stepped back
// an hour, the window "s" of 2 h that started at start, and checks that it
// fires when its budget of elapsed time runs out (its cancel recorded).
// Run it in a synctest bubble.
func resumeOnTheSteppedClock(t *testing.T, store watchdog.EventStore, p watchdog.Policy, start time.Time, opts ...watchdog.Option) {
	t.Helper()
	w2 := watchdog.New(append([]watchdog.Option{watchdog.WithStore(store)}, opts...)...)
	defer w2.Close(context.Background())
	watchdog.StepWallClock(w2, -time.Hour)
	r, err := w2.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	assert.Equal(t, start.Add(-time.Hour+2*time.Hour).UTC(), r.Deadline().UTC(), "2 h after the start, on the stepped clock")
	<-r.Context().Done()
	assert.Equal(t, 2*time.Hour+time.Nanosecond, time.Since(start), "fired when the budget of elapsed time ran out")
	require.NoError(t, w2.Check(context.Background())) // the cancel recorded
}

// blockingClock is a Clock of the user's whose Now blocks once block is
// closed... until release is closed.
type blockingClock struct {
	clock.Clock
	block, release chan struct{}
}

func (c *blockingClock) Now() time.Time {
	select {
	case <-c.block:
		<-c.release
	default:
	}
	return c.Clock.Now()
}

// Close's reading of a user's Clock (to see a step) is bounded by Close's
// ctx: a Clock that blocks is named in Close's error, and Close returns by
// its deadline.
func TestCloseReadsAUserClockWithinItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &blockingClock{Clock: clock.New(), block: make(chan struct{}), release: make(chan struct{})}
		w := watchdog.New(watchdog.WithClock(c))
		_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		close(c.block)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		begin := time.Now()
		err = w.Close(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "Clock")
		assert.LessOrEqual(t, time.Since(begin), time.Second)
		close(c.release)
		synctest.Wait()
	})
}
