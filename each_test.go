package watchdog_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// eachStore is a MemoryStore that is also a watchdog.EachAppender: it
// records the size of each batch and each event's result. Once gated, its
// next call waits for the gate (ignoring its context); the first panics
// calls panic.
type eachStore struct {
	*watchdog.MemoryStore
	mu      sync.Mutex
	sizes   []int
	refused []string // kinds of events refused, with the session of each
	gate    chan struct{}
	panics  int
}

func newEachStore() *eachStore { return &eachStore{MemoryStore: watchdog.NewMemoryStore()} }

func (s *eachStore) AppendEach(ctx context.Context, evs []watchdog.Event) []error {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(evs))
	gate, boom := s.gate, s.panics > 0
	s.gate = nil
	s.panics--
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if boom {
		panic("store: batch on fire")
	}
	var errs []error
	for i, e := range evs {
		if err := s.MemoryStore.Append(ctx, e); err != nil {
			if errs == nil {
				errs = make([]error, len(evs))
			}
			errs[i] = err
			s.mu.Lock()
			s.refused = append(s.refused, e.AggregateID+" "+e.Kind)
			s.mu.Unlock()
		}
	}
	return errs
}

func (s *eachStore) setGate() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
	return s.gate
}

func (s *eachStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// With a store that appends each event of a batch on its own, the records
// queued while the store was busy go out in one call (up to 512 records), not
// one call per record.
func TestAStoreThatAppendsEachGetsTheBacklogInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newEachStore()
		gate := store.setGate()
		w := watchdog.New(watchdog.WithStore(store))
		for i := range 100 {
			_, err := w.Start(context.Background(), "s"+string(rune('A'+i/26))+string(rune('a'+i%26)), time.Now(), watchdog.Policy{})
			require.NoError(t, err)
			synctest.Wait() // the first start is in the gated call; the rest queue
		}
		close(gate)
		synctest.Wait()
		assert.Equal(t, []int{1, 99}, store.batchSizes())
		require.NoError(t, w.Close(context.Background()))
	})
}

// A terminal record that loses its window's race (another process ended
// the window) is dropped alone: the records of other sessions in the same
// batch are recorded, and Close reports nothing lost.
func TestALostTerminalRaceInABatchSparesTheOtherSessionsRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newEachStore()
		gate := store.setGate()
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		a, err := w.Start(context.Background(), "a", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		synctest.Wait() // a's start is in the gated call
		b, err := w.Start(context.Background(), "b", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		// Another process stops a's window first.
		other := watchdog.Event{ID: "other-stop", AggregateID: "a", Kind: watchdog.KindStop, Window: 1, Reason: watchdog.StopCompleted,
			SessionStartedAt: start, WindowStartedAt: start, OccurredAt: start}
		require.NoError(t, store.MemoryStore.Append(context.Background(), other))
		<-a.Context().Done()
		<-b.Context().Done()
		synctest.Wait()
		close(gate)
		synctest.Wait()
		assert.Equal(t, []int{1, 5, 1}, store.batchSizes(), "b's start and both fires in one batch; then why a's decision has no cancel")
		assert.Equal(t, []string{"a " + watchdog.KindCancel}, store.refused)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store.MemoryStore, "b")))
		assert.Equal(t, []string{watchdog.KindStop, watchdog.KindStart, watchdog.KindDecision, watchdog.KindSuperseded}, kinds(load(t, store.MemoryStore, "a")))
		require.NoError(t, w.Close(context.Background()), "a lost race is not a lost record")
	})
}

// A batch whose call panics is retried whole; the panic is counted once.
func TestAPanickingAppendEachIsCountedOnceAndLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newEachStore()
		gate := store.setGate()
		store.panics = 1
		w := watchdog.New(watchdog.WithStore(store))
		for _, id := range []string{"a", "b", "c"} {
			_, err := w.Start(context.Background(), id, time.Now(), watchdog.Policy{})
			require.NoError(t, err)
			synctest.Wait()
		}
		close(gate) // the first call panics: a's start is retried after its backoff
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, int64(1), w.Stats().Panics)
		for _, id := range []string{"a", "b", "c"} {
			assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, id)), id)
		}
		require.NoError(t, w.Close(context.Background()))
	})
}

// A batch whose call hangs holds the queue up for the Append timeout only:
// then a fresh goroutine takes over, the hung batch's sessions back off and
// are retried, and the hung call's late success is a duplicate, skipped.
func TestAHungAppendEachHoldsUpTheQueueForItsTimeoutOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newEachStore()
		gate := store.setGate()
		w := watchdog.New(watchdog.WithStore(store))
		_, err := w.Start(context.Background(), "stuck", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		synctest.Wait()
		_, err = w.Start(context.Background(), "queued", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, w.Stats().HungAppends)
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "queued")), "recorded by the goroutine that took over")
		time.Sleep(time.Minute) // the hung batch's retry
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "stuck")))
		close(gate)
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "stuck")), "recorded once")
		assert.Zero(t, w.Stats().HungAppends)
		require.NoError(t, w.Close(context.Background()))
	})
}
