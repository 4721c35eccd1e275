package watchdog

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// Rearming the scheduler's timer (as a deadline layer's end does) while a
// session is moved earlier in the schedule (as BeginChildWait and EndWait
// do) is no data race: the earliest due time is read under mu, where it
// moves. Run with -race.
func TestRearmingWhileASessionIsRescheduledIsRaceFree(t *testing.T) {
	mock := clock.NewMock()
	w := New(WithClock(mock), WithStore(NewMemoryStore()))
	defer func() { _ = w.Close(context.Background()) }()
	s, err := w.Start(context.Background(), "s", mock.Now(), Policy{WallClock: time.Hour})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			w.mu.Lock()
			w.pullInLocked(s, toNanos(mock.Now().Add(time.Hour))-int64(i)) // as BeginChildWait and EndWait do
			w.mu.Unlock()
		}
	})
	wg.Go(func() {
		for range 2000 {
			w.rearm() // as a deadline layer's end does
		}
	})
	wg.Wait()
}
