package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Regression (fixed in the core; kept so it stays fixed): lateClock reads now from a mock but its timers never fire on their own:
// the scheduler runs only when Check asks, i.e. late (a suspended laptop, a
// wall-clock step, a long GC pause).
type lateClock struct {
	now  *clock.Mock
	dead *clock.Mock
}

func (c lateClock) Now() time.Time                                   { return c.now.Now() }
func (c lateClock) AfterFunc(d time.Duration, f func()) *clock.Timer { return c.dead.AfterFunc(d, f) }

// A scheduler pass that runs later than a fired handler's deadline+grace
// spins forever under w.mu: the idle rule's BoundedWork branch returns
// Next = BoundedUntil+1ns <= now, and runDue pops it again in the same pass.
func TestALateSchedulerPassPastAHandlersGraceEnds(t *testing.T) {
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(lateClock{mock, clock.NewMock()}), watchdog.WithStore(watchdog.NewMemoryStore()))
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1, HandlerGrace: time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	go watchdog.Call(s.Context(), "slow", 5*time.Second, func(ctx context.Context) error {
		close(entered)
		<-release // ignores its context
		return nil
	})
	<-entered
	mock.Add(30 * time.Second) // the scheduler wakes 25 s after the handler's deadline
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.Check(ctx), "scheduler pass never finished")
}
