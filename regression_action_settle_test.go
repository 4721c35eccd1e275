package watchdog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): With a custom action and the default SettleChecks (3), the idle rule's
// decision is always "superseded" when the action goroutine re-derives it,
// because the decision reset StaleChecks to 0.
func TestCustomActionRunsForTheIdleRuleWithASettleWindow(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	var acted atomic.Int32
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
		acted.Add(1)
		return nil
	}))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 10*time.Minute, w)
	evs := load(t, store, "s")
	require.Zero(t, countKind(evs, watchdog.KindSuperseded), "nothing superseded the decision")
	require.Equal(t, int32(1), acted.Load(), "the action should have run for a session silent for 10 minutes")
	require.Error(t, s.Context().Err())
}
