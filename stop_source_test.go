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

// stopSourceStore is a leaseStore that is a StopSource: ServeStops hands
// the Watchdog's stop function to the test and runs until its context ends.
type stopSourceStore struct {
	*leaseStore
	stops  chan func(string, int, string, string) error
	served chan struct{} // closed when ServeStops returns
}

func (s *stopSourceStore) ServeStops(ctx context.Context, owner string, stop func(string, int, string, string) error) error {
	defer close(s.served)
	s.stops <- stop
	<-ctx.Done()
	return nil
}

// A store that carries stop requests (StopSource) is served from New to
// Close; a request ends a running window exactly as StopBy does, and one
// for a window this Watchdog does not run, or with a by or why StopBy
// refuses, is refused and records nothing.
func TestAStopSourceStopsAWindowAsStopByDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &stopSourceStore{leaseStore: newLeaseStore(), stops: make(chan func(string, int, string, string) error, 1), served: make(chan struct{})}
		w := watchdog.New(watchdog.WithStore(store))
		stop := <-store.stops
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)

		assert.ErrorIs(t, stop("agent", 1, "", "why"), watchdog.ErrInvalidArgument)
		assert.ErrorIs(t, stop("agent", 2, "alice", "why"), watchdog.ErrUnknownSession, "another window")
		assert.ErrorIs(t, stop("nobody", 1, "alice", "why"), watchdog.ErrUnknownSession)
		require.NoError(t, stop("agent", 1, "alice", "runaway"))
		assert.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrSessionStopped)
		assert.EqualError(t, context.Cause(s.Context()), "watchdog: session stopped by alice: runaway")
		assert.ErrorIs(t, stop("agent", 1, "bob", "again"), watchdog.ErrUnknownSession, "ended: no longer run here")

		require.NoError(t, w.Close(context.Background()))
		<-store.served
		evs := load(t, store.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds(evs))
		assert.Equal(t, watchdog.StopRequested, evs[1].Reason)
		assert.Equal(t, "alice", evs[1].By)
		assert.Equal(t, "runaway", evs[1].Why)
	})
}
