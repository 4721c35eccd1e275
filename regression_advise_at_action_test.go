package watchdog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): When the action goroutine re-derives a queued decision and gets an Advise
// (a rule in shadow mode came due meanwhile), runAction treats it as a
// Continue: Next is zero, so the session is never scheduled again and even
// its wall clock never fires.
func TestAShadowAdviceAtActionTimeKeepsTheSessionWatched(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	entered, release := make(chan string, 2), make(chan struct{})
	var first atomic.Bool
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
		if first.CompareAndSwap(false, true) {
			entered <- s.ID()
			<-release
		}
		return nil
	}))
	_, err := w.Start(context.Background(), "a", t0, watchdog.Policy{WallClock: 10*time.Second - 1})
	require.NoError(t, err)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1,
		SessionCeiling: 15 * time.Second, RuleModes: map[string]watchdog.Mode{watchdog.RuleSessionCeiling: watchdog.ModeShadow}}
	b, err := w.Start(context.Background(), "b", t0, p)
	require.NoError(t, err)
	b.Touch(watchdog.ChannelStdout)

	mock.Add(10*time.Second + 1)
	checked := make(chan error, 1)
	go func() { checked <- w.Check(context.Background()) }()
	require.Equal(t, "a", <-entered) // b's idle decision waits behind a's action
	mock.Add(10 * time.Second)       // b passes its (shadow) session ceiling meanwhile
	close(release)
	require.NoError(t, <-checked)
	require.NoError(t, w.Check(context.Background()))

	advance(t, mock, 2*time.Hour, w)
	require.Error(t, b.Context().Err(), "b outlived its 1h wall clock by far")
}
