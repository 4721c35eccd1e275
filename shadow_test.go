package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Shadow mode records the decision and leaves the session
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
		assert.Equal(t, "HARD_STOP", jsonField(t, d, "verdict"))
	}
	assert.Empty(t, ofKind(evs, watchdog.KindCancel))
	require.NoError(t, s.Stop())

	// One rule in shadow, the others act.
	p.Mode = ""
	p.RuleModes = map[string]watchdog.Mode{"idle": watchdog.ModeShadow}
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
	p.RuleModes = map[string]watchdog.Mode{"idle": watchdog.ModeShadow}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 15*time.Second, w) // episode 1: advised once
	s.Touch(watchdog.ChannelStdout)     // output resumes
	advance(t, mock, 25*time.Second, w) // episode 2
	require.NoError(t, s.Context().Err())
	assert.Len(t, ofKind(load(t, store, "s"), watchdog.KindDecision), 2)
}

// With the wall clock in shadow mode and already advised, the idle rule off
// and the children-wait ceiling acting, a child wait begun after the advice
// is still ended by the ceiling: a rule in shadow mode never switches off
// the rules that act.
func TestChildWaitCeilingAppliesAfterAShadowAdvice(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Minute, ChildrenWaitCeiling: 30 * time.Second,
		RuleModes: map[string]watchdog.Mode{"wall_clock": watchdog.ModeShadow}}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 2*time.Minute, w) // wall clock advised
	cw := s.BeginChildWait()
	defer cw()
	advance(t, mock, 10*time.Minute, w) // waits 10 min on children, ceiling 30 s
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrChildrenWaitExceeded)
}

// With the wall clock in shadow mode (advised during a wait) and the idle
// rule acting, the idle rule applies again once the wait ends: a session
// silent for 10 minutes after EndWait is stopped. An advice given while
// waiting must not leave the session unwatched afterwards.
func TestIdleRuleAppliesAfterAWaitWhenTheWallClockIsInShadow(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Minute, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		RuleModes: map[string]watchdog.Mode{"wall_clock": watchdog.ModeShadow}}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)
	s.Wait(5*time.Minute, nil)
	advance(t, mock, 2*time.Minute, w) // wall clock advised while waiting
	require.True(t, s.EndWait())
	advance(t, mock, 10*time.Minute, w) // silent 10 min after the wait ended
	require.Error(t, s.Context().Err(), "idle rule should have fired")
}
