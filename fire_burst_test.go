package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Over several bursts of fires, every kept verdict (the context's cause)
// and every recorded decision and cancel event is the session's own, and
// they agree with each other: an event naming another session, or one
// missing, would show a fire's facts mixed up on their way to the recorder.
func TestEveryFireOfABurstKeepsItsOwnVerdictAndEvents(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	ctx := context.Background()
	const rounds, perRound = 4, 700 // more than two batches of records per round
	var sessions []*watchdog.Session
	for r := range rounds {
		for i := range perRound {
			budget := time.Duration(i/37+1) * time.Millisecond // 37 fires per pass
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
		require.Len(t, dec.EvidenceSummary, 4, s.ID())
	}
}
