package watchdog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// newMockAtT0 returns a mock clock at a fixed, recent instant.
func newMockAtT0() *clock.Mock {
	m := clock.NewMock()
	m.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	return m
}

// cancelFailStore fails the first Append of session id's cancel event, or
// every one if always is set.
type cancelFailStore struct {
	*MemoryStore
	id     string
	always bool
	mu     sync.Mutex
	failed bool
}

func (f *cancelFailStore) Append(ctx context.Context, evs ...Event) error {
	f.mu.Lock()
	fail := (f.always || !f.failed) && len(evs) == 1 && evs[0].AggregateID == f.id && evs[0].Kind == KindCancel
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		return errors.New("store down")
	}
	return f.MemoryStore.Append(ctx, evs...)
}

// Close retries exactly the events of fires still queued (b's cancel, not
// its decision, nor a's or c's events) and names the one it could not
// record.
func TestCloseRetriesOnlyTheUnrecordedEventsOfFires(t *testing.T) {
	mock := newMockAtT0()
	store := &cancelFailStore{MemoryStore: NewMemoryStore(), id: "b", always: true}
	w := New(WithClock(mock), WithStore(store))
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		_, err := w.Start(ctx, id, mock.Now(), Policy{WallClock: time.Second})
		require.NoError(t, err)
	}
	mock.Add(time.Second + time.Millisecond) // one pass fires all three
	require.NoError(t, w.Check(ctx))

	err := w.Close(ctx)
	require.ErrorIs(t, err, ErrNotRecorded)
	require.Contains(t, err.Error(), "1 event(s): "+KindCancel+` session "b" window 1`)
	for id, want := range map[string]int{"a": 3, "b": 2, "c": 3} {
		evs, err := store.Load(ctx, id)
		require.NoError(t, err)
		require.Len(t, evs, want, id)
	}
}

// Fires decided in one pass are queued together. When the store fails one
// session's cancel event, only that session backs off: the others' events
// are recorded at once, the failed session keeps its order (its decision
// once, then its cancel on retry), and a Resume in between already sees the
// queued cancel and opens the next window.
func TestAFailedAppendInABurstOfFiresBacksOffOnlyItsSession(t *testing.T) {
	mock := newMockAtT0()
	store := &cancelFailStore{MemoryStore: NewMemoryStore(), id: "s2"}
	w := New(WithClock(mock), WithStore(store))
	defer func() { _ = w.Close(context.Background()) }()
	ctx := context.Background()
	pol := Policy{WallClock: time.Second}
	for _, id := range []string{"s0", "s1", "s2", "s3", "s4"} {
		_, err := w.Start(ctx, id, mock.Now(), pol)
		require.NoError(t, err)
	}
	mock.Add(time.Second + time.Millisecond) // one pass fires all five; the retry is 100ms later
	require.NoError(t, w.Check(ctx))
	kinds := func(id string) []string {
		evs, err := store.Load(ctx, id)
		require.NoError(t, err)
		var out []string
		for _, e := range evs {
			out = append(out, e.Kind)
		}
		return out
	}
	full := []string{KindStart, KindDecision, KindCancel}
	for _, id := range []string{"s0", "s1", "s3", "s4"} {
		require.Equal(t, full, kinds(id), id)
	}
	require.Equal(t, full[:2], kinds("s2"), "s2's cancel waits for its retry")

	s2, err := w.Resume(ctx, "s2", pol) // sees the queued cancel: a fresh window
	require.NoError(t, err)
	require.Equal(t, 2, s2.Window())

	mock.Add(defaultRetryMin)
	require.NoError(t, w.Check(ctx))
	require.Equal(t, []string{KindStart, KindDecision, KindCancel, KindResume}, kinds("s2"))
	evs, err := store.Load(ctx, "s2")
	require.NoError(t, err)
	require.Equal(t, evs[1].ID, evs[2].DecidedByDecisionID)
	require.NoError(t, w.Close(ctx))
}
