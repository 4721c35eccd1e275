package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Scenario 5: shadow mode records the decision and leaves the session
// running; act mode records the decision, then the outcome, linked.
func TestShadowModeRecordsTheDecisionAndLeavesTheSessionRunning(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.WallClock = 30 * time.Second
	p.Mode = watchdog.ModeShadow
	s, err := w.Start(context.Background(), "shadow", t0, p)
	require.NoError(t, err)
	advance(t, mock, time.Minute, w)
	require.NoError(t, s.Context().Err(), "shadow mode never acts")
	evs := load(t, store, "shadow")
	decs := ofKind(evs, watchdog.KindDecision)
	require.Len(t, decs, 2, "one decision per rule, not one per look: %v", kinds(evs))
	assert.Equal(t, "idle", decs[0].Rule)
	assert.Equal(t, "wall_clock", decs[1].Rule)
	for _, d := range decs {
		assert.Equal(t, watchdog.ModeShadow, d.Mode)
		assert.Equal(t, "HARD_STOP", d.Verdict)
	}
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
	require.NoError(t, s.Stop())

	// One rule in shadow, the others act.
	p.Mode = ""
	p.RuleModes = map[string]watchdog.Mode{watchdog.RuleIdle: watchdog.ModeShadow}
	s, err = w.Start(context.Background(), "mixed", mock.Now(), p)
	require.NoError(t, err)
	advance(t, mock, time.Minute, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
	evs = load(t, store, "mixed")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.Equal(t, watchdog.ModeShadow, evs[1].Mode)
	assert.Equal(t, watchdog.ModeAct, evs[2].Mode)
	assert.Equal(t, evs[2].ID, evs[3].DecidedByDecisionID)
}

func TestShadowIdleAdvisesAgainInTheNextEpisode(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.RuleModes = map[string]watchdog.Mode{watchdog.RuleIdle: watchdog.ModeShadow}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 15*time.Second, w) // episode 1: advised once
	s.Touch(watchdog.ChannelStdout)     // output resumes
	advance(t, mock, 25*time.Second, w) // episode 2
	require.NoError(t, s.Context().Err())
	assert.Len(t, ofKind(load(t, store, "s"), watchdog.KindDecision), 2)
}
