package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): Wall clock in shadow mode (advised once), children-wait ceiling in act
// mode, idle off. After the advice nothing is scheduled (Next zero);
// BeginChildWait only moves a Scheduled item, so the ceiling never fires.
func TestChildWaitCeilingAppliesAfterAShadowAdvice(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Minute, ChildrenWaitCeiling: 30 * time.Second,
		RuleModes: map[string]watchdog.Mode{watchdog.RuleWallClock: watchdog.ModeShadow}}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 2*time.Minute, w) // wall clock advised
	cw := s.BeginChildWait()
	defer cw()
	advance(t, mock, 10*time.Minute, w) // waits 10 min on children, ceiling 30 s
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrChildrenWaitExceeded)
}
