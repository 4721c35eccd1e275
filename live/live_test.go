package live_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/live"
)

func ev(id, kind string, window int, at time.Time, owner string, p *watchdog.Policy) watchdog.Event {
	return watchdog.Event{ID: id + kind + at.String(), AggregateID: id, Kind: kind, Window: window, Owner: owner, Policy: p,
		SessionStartedAt: at, WindowStartedAt: at, OccurredAt: at, ConfiguredBudgetSeconds: 60}
}

// The list holds the windows without a terminal event, the latest window
// of each session, sorted by their earliest stop (the latest checkpoint's
// when it says one, else the policy's deadline), filtered by owner; a
// window's facts are its latest verdict's or checkpoint's.
func TestTheListHoldsTheOpenWindowsByEarliestStop(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	hour, min := &watchdog.Policy{WallClock: time.Hour}, &watchdog.Policy{WallClock: time.Minute}
	later := t0.Add(20 * time.Second)
	ckpt := ev("b", watchdog.KindCheckpoint, 1, t0.Add(10*time.Second), "o2", nil)
	ckpt.EvidenceSummary = []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &later, Counter: 3}, {Channel: "workspace"}}
	ckpt.HandlersInFlight, ckpt.CallsInFlight = 2, []watchdog.CallInFlight{{Name: "Bash"}, {Name: "Read"}}
	ckpt.StopAt, ckpt.StopRule = t0.Add(50*time.Second), "idle"
	verdict := ev("c", watchdog.KindVerdict, 1, t0.Add(5*time.Second), "o1", nil)
	verdict.Rule, verdict.ActiveChannel = "idle", "stdout"
	events := []watchdog.Event{
		ev("a", watchdog.KindStart, 1, t0, "o1", hour),
		ev("b", watchdog.KindStart, 1, t0, "o2", hour), ckpt,
		ev("c", watchdog.KindStart, 1, t0, "o1", min), verdict,
		ev("d", watchdog.KindStart, 1, t0, "o1", min), ev("d", watchdog.KindStop, 1, t0.Add(time.Second), "o1", nil),
		ev("e", watchdog.KindStart, 1, t0, "o1", min), ev("e", watchdog.KindStop, 1, t0.Add(time.Second), "o1", nil),
		ev("e", watchdog.KindResume, 2, t0.Add(2*time.Second), "o3", hour),
	}
	at := t0.Add(30 * time.Second)
	l := live.FromEvents(events, at, map[string]live.Lease{"o2": {ExpiresAt: at}}, live.Filter{})
	var got []string
	for _, r := range l.Rows {
		got = append(got, r.Session+" "+r.StopRule+" "+r.StopAt.Sub(t0).String())
	}
	assert.Equal(t, []string{"b idle 50s", "c wall_clock 1m0s", "a wall_clock 1h0m0s", "e wall_clock 1h0m2s"}, got)
	b, c := l.Rows[0], l.Rows[1]
	assert.Equal(t, 2, b.CallsInFlight)
	assert.Equal(t, "Bash", b.OldestCall)
	assert.Equal(t, "stdout", b.Freshest)
	assert.True(t, b.FreshestAt.Equal(later))
	assert.True(t, b.FactsAt.Equal(t0.Add(10*time.Second)))
	require.NotNil(t, b.Lease)
	assert.True(t, b.Lease.Expired, "a lease expiring at the list's instant has expired")
	require.NotNil(t, c.LastVerdict)
	assert.Equal(t, live.Verdict{At: t0.Add(5 * time.Second), Verdict: "CONTINUE", Rule: "idle", ActiveChannel: "stdout"}, *c.LastVerdict)
	assert.Equal(t, 30.0, c.ElapsedSeconds)
	assert.Equal(t, 2, l.Rows[3].Window)
	assert.Equal(t, "o3", l.Rows[3].Owner)

	l = live.FromEvents(events, at, nil, live.Filter{Owner: "o1"})
	require.Len(t, l.Rows, 2)
	assert.Equal(t, "c", l.Rows[0].Session)
	assert.Equal(t, "a", l.Rows[1].Session)
}
