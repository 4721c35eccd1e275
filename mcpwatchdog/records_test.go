package mcpwatchdog_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/mcpwatchdog"
)

// watched starts the session "agent" under p on a fresh Watchdog with
// opts, recording into the store it returns.
func watched(t *testing.T, p watchdog.Policy, opts ...watchdog.Option) (*watchdog.Watchdog, *watchdog.Session, *watchdog.MemoryStore) {
	t.Helper()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(append([]watchdog.Option{watchdog.WithStore(store)}, opts...)...)
	s, err := w.Start(context.Background(), "agent", time.Now(), p)
	require.NoError(t, err)
	return w, s, store
}

// closeAndLoad closes w and returns the events of the session "agent".
func closeAndLoad(t *testing.T, w *watchdog.Watchdog, store *watchdog.MemoryStore) []watchdog.Event {
	t.Helper()
	require.NoError(t, w.Close(context.Background()))
	evs, err := store.Load(context.Background(), "agent")
	require.NoError(t, err)
	return evs
}

func ofKind(evs []watchdog.Event, kind string) []watchdog.Event {
	var out []watchdog.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// progressBits is how a progress notification's value is recorded: the
// float64's bits (math.Float64frombits gives it back).
func progressBits(v float64) uint64 { return math.Float64bits(v) }

// With the Watchdog's call records on, each tool call's end is recorded
// with the tool's name, how it ended, its last progress and how long it
// ran, from which its start follows; a call that overran has its deadline
// record too.
func TestEachToolCallIsRecordedWithItsStartAndEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, s, store := watched(t, watchdog.Policy{}, watchdog.WithCallRecords(10))
		cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
		begin := time.Now()
		_, err := cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "works"})
		require.NoError(t, err)
		second := time.Now()
		_, err = cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "stalls"})
		verdictOf(t, err)
		require.NoError(t, s.Stop())
		evs := closeAndLoad(t, w, store)

		done := ofKind(evs, watchdog.KindCallCompleted)
		require.Len(t, done, 2)
		assert.Equal(t, "works", done[0].Handler)
		assert.Equal(t, "ok", done[0].Reason)
		assert.Equal(t, 2.1, done[0].MeasureSeconds)
		assert.Equal(t, 5.0, done[0].LimitSeconds, "its cap")
		assert.Equal(t, progressBits(1), done[0].ProgressValue, "its last progress: 20/20")
		assert.True(t, begin.Equal(done[0].OccurredAt.Add(-2100*time.Millisecond)), "it started when the caller called")
		assert.Equal(t, "stalls", done[1].Handler)
		assert.Equal(t, "handler_idle_exceeded", done[1].Reason)
		assert.Equal(t, 0.3, done[1].MeasureSeconds)
		assert.True(t, second.Equal(done[1].OccurredAt.Add(-300*time.Millisecond)))

		over := ofKind(evs, watchdog.KindHandlerDeadline)
		require.Len(t, over, 1)
		assert.Equal(t, "stalls", over[0].Handler)
		assert.Equal(t, "handler_idle", over[0].Rule)
		require.NoError(t, cs.Close())
	})
}

// A tool call still running at a session's verdict is listed on it with
// its start, its limits and its last progress.
func TestAToolCallInFlightAtASessionVerdictIsListedWithItsStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, s, store := watched(t, watchdog.Policy{WallClock: 950 * time.Millisecond})
		cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
		begin := time.Now()
		_, err := cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "works"})
		require.Error(t, err, "the session's verdict ended the call")
		evs := closeAndLoad(t, w, store)

		dec := ofKind(evs, watchdog.KindDecision)
		require.Len(t, dec, 1)
		assert.Equal(t, "wall_clock", dec[0].Rule)
		require.Len(t, dec[0].CallsInFlight, 1)
		c := dec[0].CallsInFlight[0]
		assert.Equal(t, "works", c.Name)
		assert.True(t, begin.Equal(c.StartedAt), "started %v, recorded %v", begin, c.StartedAt)
		assert.Equal(t, 5.0, c.BudgetSeconds)
		assert.Equal(t, 0.3, c.IdleSeconds)
		assert.Equal(t, progressBits(float64(9)/20), c.Progress, "the 9th step, at 900 ms")
		assert.True(t, begin.Add(900*time.Millisecond).Equal(c.ProgressAt))
		require.NoError(t, cs.Close())
	})
}

// toolChannel returns the mcp_tool entry of the evidence summary of the
// session's only decision.
func toolChannel(t *testing.T, evs []watchdog.Event) watchdog.EvidenceEntry {
	t.Helper()
	dec := ofKind(evs, watchdog.KindDecision)
	require.Len(t, dec, 1)
	for _, en := range dec[0].EvidenceSummary {
		if en.Channel == "mcp_tool" {
			return en
		}
	}
	require.FailNow(t, "no mcp_tool channel in the evidence summary")
	return watchdog.EvidenceEntry{}
}

// A tool call is evidence on the session's tool channel at its start, at
// each progress notification whose value advances, and at its end; a
// notification that repeats the last value is not.
func TestToolCallsAreEvidenceOnTheToolChannelOnlyWhenProgressAdvances(t *testing.T) {
	for _, tc := range []struct {
		name, tool string
		records    uint64        // evidence recorded on the channel
		last       time.Duration // the latest, from the call's start
	}{
		// Its start, 20 advancing notifications 100 ms apart, its end
		// 100 ms after the last one.
		{"advancing progress", "works", 1 + 20 + 1, 2100 * time.Millisecond},
		// Its start, the first notification (100 ms), not the repeats
		// (200, 300 ms), its end at the idle limit (400 ms).
		{"repeated progress", "repeats", 3, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, s, store := watched(t, watchdog.Policy{WallClock: 10 * time.Second})
				cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
				begin := time.Now()
				_, _ = cs.CallTool(s.Context(), &mcp.CallToolParams{Name: tc.tool})
				<-s.Context().Done() // the wall-clock verdict, which records the evidence
				en := toolChannel(t, closeAndLoad(t, w, store))
				assert.Equal(t, tc.records, en.Counter)
				require.NotNil(t, en.LastAt)
				// Evidence is dated exactly.
				assert.Equal(t, begin.Add(tc.last).UTC(), en.LastAt.UTC())
				require.NoError(t, cs.Close())
			})
		})
	}
}
