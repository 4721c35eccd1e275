package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// arbStore is a store shared by several Watchdogs (standing for processes)
// that arbitrates window openings, as the PostgreSQL store does; it fails
// every Append while down.
type arbStore struct {
	*watchdog.MemoryStore
	mu     sync.Mutex
	opened map[string]string // "id/window" -> the opening event's id
	down   bool
	loads  *sync.WaitGroup // if set, each Load returns once every expected Load has read
}

func (a *arbStore) Load(ctx context.Context, id string) ([]watchdog.Event, error) {
	a.mu.Lock()
	loads := a.loads
	a.mu.Unlock()
	evs, err := a.MemoryStore.Load(ctx, id)
	if loads != nil {
		loads.Done()
		loads.Wait()
	}
	return evs, err
}

func newArbStore() *arbStore {
	return &arbStore{MemoryStore: watchdog.NewMemoryStore(), opened: map[string]string{}}
}

func (a *arbStore) Arbitrates() bool { return true }

func (a *arbStore) Append(ctx context.Context, evs ...watchdog.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return errStoreDown
	}
	for _, e := range evs {
		if k := fmt.Sprint(e.AggregateID, "/", e.Window); e.OpensWindow && a.opened[k] != "" && a.opened[k] != e.ID {
			return fmt.Errorf("%w: session %q window %d opened by event %s", watchdog.ErrAlreadyWatched, e.AggregateID, e.Window, a.opened[k])
		}
	}
	if err := a.MemoryStore.Append(ctx, evs...); err != nil {
		return err
	}
	for _, e := range evs {
		if e.OpensWindow {
			a.opened[fmt.Sprint(e.AggregateID, "/", e.Window)] = e.ID
		}
	}
	return nil
}

func (a *arbStore) setDown(down bool) {
	a.mu.Lock()
	a.down = down
	a.mu.Unlock()
}

// Two Watchdogs (two processes) that start one id: the second is told the
// window is open elsewhere and watches nothing; one start is recorded and
// one verdict decides the window.
func TestASecondStartOfAWindowOpenElsewhereGetsErrAlreadyWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newArbStore()
		w1, w2 := watchdog.New(watchdog.WithStore(store)), watchdog.New(watchdog.WithStore(store))
		p := watchdog.Policy{WallClock: time.Second}
		s, err := w1.Start(context.Background(), "x", time.Now(), p)
		require.NoError(t, err)
		_, err = w2.Start(context.Background(), "x", time.Now(), p)
		require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
		assert.ErrorContains(t, err, "open elsewhere")
		_, err = w2.Start(context.Background(), "y", time.Now(), p)
		require.NoError(t, err, "the loser's id is free again in its own Watchdog, and other ids are unaffected")
		<-s.Context().Done()
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store.MemoryStore, "x")))
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))
	})
}

// Two processes resume an ended session at once (both read it ended):
// exactly one opens window 2; the other is told it is open elsewhere.
func TestTwoResumesOfAnEndedSessionOpenOneWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newArbStore()
		w1, w2 := watchdog.New(watchdog.WithStore(store)), watchdog.New(watchdog.WithStore(store))
		s, err := w1.Start(context.Background(), "x", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		require.NoError(t, s.Stop())
		synctest.Wait()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			won   []*watchdog.Session
			errs  []error
			loads sync.WaitGroup
		)
		loads.Add(2) // both resumes read the ended window before either opens the next
		store.mu.Lock()
		store.loads = &loads
		store.mu.Unlock()
		for _, w := range []*watchdog.Watchdog{w1, w2} {
			wg.Go(func() {
				s, err := w.Resume(context.Background(), "x", watchdog.Policy{})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else {
					won = append(won, s)
				}
			})
		}
		wg.Wait()
		require.Len(t, won, 1, "one resume opens window 2")
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], watchdog.ErrAlreadyWatched)
		assert.Equal(t, 2, won[0].Window())
		evs := load(t, store.MemoryStore, "x")
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindStop, watchdog.KindResume}, kinds(evs), "one resume recorded")
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))
	})
}

// With a store that arbitrates, Start waits for its answer: while the store
// is down Start fails when its context ends, and the start record, if the
// store takes it later, is followed at once by a stop, so that no window is
// left open with nobody watching it.
func TestStartFailsWhileTheArbitratingStoreIsDownAndLeavesNoWindowOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newArbStore()
		store.setDown(true)
		w := watchdog.New(watchdog.WithStore(store))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		begin := time.Now()
		_, err := w.Start(ctx, "x", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 2*time.Second, time.Since(begin), "Start waited for the store until its context ended")
		store.setDown(false)
		time.Sleep(time.Minute) // the record's retry
		synctest.Wait()
		evs := load(t, store.MemoryStore, "x")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds(evs))
		assert.Equal(t, watchdog.StopCanceled, evs[1].Reason)
		s, err := w.Resume(context.Background(), "x", watchdog.Policy{})
		require.NoError(t, err, "the id can be resumed")
		assert.Equal(t, 2, s.Window())
		require.NoError(t, w.Close(context.Background()))
	})
}

// Without a store that arbitrates, Start never waits for the store: it
// returns at once while the store is down, and the start is recorded later.
func TestStartWithoutAnArbitratingStoreNeverWaitsForTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFaultyStore(3)
		w := watchdog.New(watchdog.WithStore(store))
		begin := time.Now()
		_, err := w.Start(context.Background(), "x", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		assert.Zero(t, time.Since(begin))
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "x")))
		require.NoError(t, w.Close(context.Background()))
	})
}

// Two Watchdogs (two processes) decide one window at the same instant: one
// cancel is recorded, and the loser's decision gets an outcome that says it
// lost, naming the event that won; replay finds nothing wrong in the log.
func TestAnActDecisionThatLostTheRaceRecordsWhyItHasNoCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w1, w2 := watchdog.New(watchdog.WithStore(store)), watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		p := watchdog.Policy{WallClock: time.Second}
		a, err := w1.Start(context.Background(), "x", start, p)
		require.NoError(t, err)
		synctest.Wait()                                   // the start is recorded
		b, err := w2.Resume(context.Background(), "x", p) // a second supervisor of the window
		require.NoError(t, err)
		<-a.Context().Done()
		<-b.Context().Done()
		synctest.Wait()
		evs := load(t, store, "x")
		decisions := ofKind(evs, watchdog.KindDecision)
		cancels := ofKind(evs, watchdog.KindCancel)
		lost := ofKind(evs, watchdog.KindSuperseded)
		require.Len(t, decisions, 2)
		require.Len(t, cancels, 1)
		require.Len(t, lost, 1)
		assert.Equal(t, watchdog.ReasonAlreadyDecided, lost[0].Reason)
		assert.Contains(t, lost[0].Error, cancels[0].ID, "names the winner")
		assert.NotEqual(t, cancels[0].DecidedByDecisionID, lost[0].DecidedByDecisionID, "each decision has its own outcome")
		for _, d := range decisions {
			assert.Contains(t, []string{cancels[0].DecidedByDecisionID, lost[0].DecidedByDecisionID}, d.ID)
		}
		rep, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, rep)
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))
	})
}

// With a store that arbitrates, a Stop that loses to another Watchdog's
// cancel is told: its error matches ErrAlreadyDecided and carries the
// winner's verdict, the session's context ends with it, and Run's Result
// reports the winner's verdict.
func TestAStopThatLostTheRaceIsToldTheWinnersVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newArbStore()
		frozen := clock.NewMock() // this supervisor's clock stands still: it never fires
		frozen.Set(time.Now())
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
		w2 := watchdog.New(watchdog.WithStore(store))
		p := watchdog.Policy{WallClock: time.Second}
		mine := map[string]*watchdog.Session{}
		for _, id := range []string{"stop", "run"} {
			s, err := w1.Start(context.Background(), id, frozen.Now(), p)
			require.NoError(t, err)
			mine[id] = s
			_, err = w2.Resume(context.Background(), id, p) // a second supervisor of the window
			require.NoError(t, err)
		}
		time.Sleep(2 * time.Second) // w2 fires and records its cancels
		synctest.Wait()

		stopSession := mine["stop"]
		err := stopSession.Stop()
		require.ErrorIs(t, err, watchdog.ErrAlreadyDecided)
		var v *watchdog.VerdictError
		require.True(t, errors.As(err, &v), "the winner's verdict: %v", err)
		assert.Equal(t, "watchdog_wall_clock_exceeded", v.StopReasonCode())
		assert.ErrorIs(t, context.Cause(stopSession.Context()), watchdog.ErrAlreadyDecided)
		require.ErrorIs(t, stopSession.Stop(), watchdog.ErrWallClockExceeded, "a later Stop returns the winner's verdict")

		res, err := mine["run"].Run(func(context.Context) error { return nil })
		require.ErrorIs(t, err, watchdog.ErrAlreadyDecided)
		assert.Equal(t, "watchdog_wall_clock_exceeded", res.StopReasonCode, "Run reports the winner's verdict")
		for _, id := range []string{"stop", "run"} {
			evs := load(t, store.MemoryStore, id)
			assert.Len(t, ofKind(evs, watchdog.KindCancel), 1, id)
			assert.Empty(t, ofKind(evs, watchdog.KindStop), id)
		}
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))
	})
}
