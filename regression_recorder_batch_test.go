package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// orderStore records the ids it accepts and fails the ids in fail as many
// times as told.
type orderStore struct {
	mu   sync.Mutex
	got  []string
	fail map[string]int
}

func (s *orderStore) Append(_ context.Context, evs ...Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		if s.fail[e.ID] > 0 {
			s.fail[e.ID]--
			return errors.New("transient")
		}
		s.got = append(s.got, e.ID)
	}
	return nil
}

func (s *orderStore) Load(context.Context, string) ([]Event, error) { return nil, nil }

// Found in review: a drain that recorded a session's event and then failed
// the next one in the same batch cleared the session's backoff, so the
// session's later events went ahead of the failed one (here A3 before A2)
// and no retry was armed for it.
func TestRecorderKeepsASessionsOrderAndBackoffWhenALaterEventOfTheBatchFails(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"A2": 1}}
	c := defaultConfig()
	c.store, c.clock, c.log = st, mock, zap.NewNop()
	r := newRecorder(c)
	for i := range drainBatch - 2 { // A1 and A2 end the first batch, A3 starts the next
		r.queue.push(queued{Event: Event{ID: fmt.Sprintf("X%d", i), AggregateID: fmt.Sprintf("x%d", i)}})
	}
	for _, id := range []string{"A1", "A2", "A3"} {
		r.queue.push(queued{Event: Event{ID: id, AggregateID: "a"}})
	}

	r.drain() // the goroutine is not started: drain runs here

	var a []string
	for _, id := range st.got {
		if id[0] == 'A' {
			a = append(a, id)
		}
	}
	require.Equal(t, []string{"A1"}, a, "A2 failed: A3 waits behind it")
	require.NotNil(t, r.blocked["a"], "session a backs off after A2 failed")
	require.NotNil(t, r.timer, "a retry is armed")

	mock.Add(time.Hour) // past the backoff: the retry timer pokes (the goroutine is not running)
	r.drain()
	a = a[:0]
	for _, id := range st.got {
		if id[0] == 'A' {
			a = append(a, id)
		}
	}
	require.Equal(t, []string{"A1", "A2", "A3"}, a)
}

// Found in review: the scheduler read the earliest item's Due after
// releasing mu, while a Push under mu (a child wait, a wait ending) could
// move it. Run with -race.
func TestRearmReadsTheEarliestDueUnderTheLock(t *testing.T) {
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

// Found in review: the recorder forgot a session's failed attempts when its
// backoff ran out, so the backoff never grew past WithRetryBackoff's min
// instead of doubling up to max as documented.
func TestRecorderBackoffDoublesAfterEachFailedRetry(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"A1": 3}}
	c := defaultConfig()
	c.store, c.clock, c.log = st, mock, zap.NewNop()
	c.retryMin, c.retryMax = 100*time.Millisecond, time.Second
	r := newRecorder(c)
	r.queue.push(queued{Event: Event{ID: "A1", AggregateID: "a"}})
	r.queue.push(queued{Event: Event{ID: "A2", AggregateID: "a"}})

	for k, wait := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		r.drain() // fails A1 (the goroutine is not started: drain runs here)
		require.Empty(t, st.got)
		require.Equal(t, 2-k, st.fail["A1"], "attempt %d made", k+1)
		require.Equal(t, mock.Now().Add(wait), r.blocked["a"].retryAt, "the next retry is %v away", wait)
		mock.Add(wait - time.Nanosecond)
		r.drain() // still backing off: nothing attempted
		require.Equal(t, 2-k, st.fail["A1"], "no attempt during the backoff")
		mock.Add(time.Nanosecond)
	}
	r.drain() // the fourth attempt succeeds; A2 follows
	require.Equal(t, []string{"A1", "A2"}, st.got)
	require.Empty(t, r.blocked, "recorded: the backoff is over")
}
