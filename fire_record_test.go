package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// A fire's record (what its decision and cancel events are built from) is
// reused once both events are recorded, while the session keeps only its
// verdict. Over several bursts of fires, each reusing the records of the
// one before, every recorded event and every kept verdict must still be
// the session's own: a record reused without being cleared (its chain
// link, its progress) would show up as an event naming another session or
// an event missing. (An early reuse, with events still queued, is
// TestFireRecordsAreReusedOnlyOnceTheirWholeChainIsRecorded.)
func TestReusedFireRecordsNeverMixUpSessionsEventsOrVerdicts(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	ctx := context.Background()
	const rounds, perRound = 4, 700 // more than two batches of records per round
	var sessions []*watchdog.Session
	for r := range rounds {
		for i := range perRound {
			budget := time.Duration(i/37+1) * time.Millisecond // 37 fires per pass: one chain of records each
			s, err := w.Start(ctx, fmt.Sprintf("s%d-%d", r, i), mock.Now(), watchdog.Policy{WallClock: budget})
			require.NoError(t, err)
			sessions = append(sessions, s)
		}
		advance(t, mock, time.Duration(perRound/37+2)*time.Millisecond, w) // records every event due
	}
	for _, s := range sessions {
		var ve *watchdog.VerdictError
		require.True(t, errors.As(context.Cause(s.Context()), &ve), s.ID())
		require.Equal(t, s.ID(), ve.SessionID)
		evs := load(t, store, s.ID())
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs), s.ID())
		dec, cancel := evs[1], evs[2]
		require.Equal(t, ve.DecisionID, dec.ID, s.ID())
		require.Equal(t, dec.ID, cancel.DecidedByDecisionID, s.ID())
		require.Equal(t, ve.FiredAt, cancel.FiredAt, s.ID())
		require.Equal(t, ve.Budget.Seconds(), cancel.LimitSeconds, s.ID())
		require.Equal(t, ve.Budget.Seconds(), dec.LimitSeconds, s.ID())
		require.Len(t, ve.Evidence, len(dec.EvidenceSummary), s.ID())
	}
}

// failOnceStore fails the first Append of one event kind of one session.
type failOnceStore struct {
	*watchdog.MemoryStore
	id, kind string
	failed   atomic.Bool
}

func (f *failOnceStore) Append(ctx context.Context, evs ...watchdog.Event) error {
	for _, e := range evs {
		if e.AggregateID == f.id && e.Kind == f.kind && f.failed.CompareAndSwap(false, true) {
			return errStoreDown
		}
	}
	return f.MemoryStore.Append(ctx, evs...)
}

// Fires decided in one pass are queued together (a chain of records). When
// the store fails one session's cancel event, only that session backs off:
// the others' events are recorded at once, the failed session keeps its
// order (its decision once, then its cancel on retry), and a Resume in
// between already sees the queued cancel and opens the next window.
func TestAFailedAppendInABurstOfFiresBacksOffOnlyItsSession(t *testing.T) {
	mock := newMock()
	store := &failOnceStore{MemoryStore: watchdog.NewMemoryStore(), id: "s2", kind: watchdog.KindCancel}
	w := newWatchdog(t, mock, store)
	ctx := context.Background()
	pol := watchdog.Policy{WallClock: time.Second}
	for i := range 5 {
		_, err := w.Start(ctx, fmt.Sprintf("s%d", i), mock.Now(), pol)
		require.NoError(t, err)
	}
	advance(t, mock, time.Second+time.Millisecond, w) // one pass fires all five; the retry is 100ms later
	require.True(t, store.failed.Load())
	full := []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}
	for _, id := range []string{"s0", "s1", "s3", "s4"} {
		require.Equal(t, full, kinds(load(t, store, id)), id)
	}
	require.Equal(t, full[:2], kinds(load(t, store, "s2")), "s2's cancel waits for its retry")

	s2, err := w.Resume(ctx, "s2", pol) // sees the queued cancel: a fresh window
	require.NoError(t, err)
	require.Equal(t, 2, s2.Window())

	advance(t, mock, watchdog.DefaultRetryMin, w)
	evs := load(t, store, "s2")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel, watchdog.KindResume}, kinds(evs))
	require.Equal(t, evs[1].ID, evs[2].DecidedByDecisionID)
	require.NoError(t, w.Close(ctx))
}
