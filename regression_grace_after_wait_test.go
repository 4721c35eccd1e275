package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): StartupGrace is documented as "until the first baseline output or until
// StartupGrace has passed since the window started". After EndWait (and after
// a wait timeout, an attempt cancel, a same-window Resume) observedSince moves
// to now, earlier output no longer counts, and the full startup grace is
// granted again.
func TestStartupGraceIsNotGrantedAgainAfterAWait(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: 4 * time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		StartupGrace: 5 * time.Minute}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout) // printed: the grace is over
	s.Wait(time.Hour, nil)
	advance(t, mock, time.Minute, w)
	s.EndWait()
	advance(t, mock, time.Minute, w) // silent for 60 s > IdleWindow after the wait ended
	require.Error(t, s.Context().Err(), "silent 60 s after EndWait with a 10 s idle window; the startup grace was re-applied")
}
