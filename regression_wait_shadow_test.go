package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): Wall clock in shadow mode, idle rule in act mode. While waiting, Decide has
// nothing left to schedule (Next zero) so the session item leaves the heap;
// EndWait / the wait timeout only re-push a Scheduled item, so the idle rule
// never runs again.
func TestIdleRuleAppliesAfterAWaitWhenTheWallClockIsInShadow(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Minute, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		RuleModes: map[string]watchdog.Mode{watchdog.RuleWallClock: watchdog.ModeShadow}}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)
	s.Wait(5*time.Minute, nil)
	advance(t, mock, 2*time.Minute, w) // wall clock advised while waiting
	require.True(t, s.EndWait())
	advance(t, mock, 10*time.Minute, w) // silent 10 min after the wait ended
	require.Error(t, s.Context().Err(), "idle rule should have fired")
}
