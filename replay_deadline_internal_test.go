package watchdog

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capRecord is the deadline record of a call under cap d that fired at
// start + at, as fireLocked writes it.
func capRecord(start time.Time, d, at time.Duration) Event {
	c := CallInFlight{Name: "x", Layer: LayerHandler, StartedAt: start, BudgetSeconds: d.Seconds()}
	return Event{Kind: KindHandlerDeadline, Handler: "x", Layer: "handler", Rule: "handler_deadline",
		OccurredAt: start.Add(at), MeasureSeconds: at.Seconds(), LimitSeconds: d.Seconds(), CallsInFlight: []CallInFlight{c}}
}

// A limit recorded in float64 seconds comes back to the nanosecond under
// 2^51 ns, so Replay re-derives such a fire with no slack at all; above,
// the slack of limitSlack covers what the seconds lose, and a record
// further before its due instant is still reported.
func TestReplayToleratesOnlyWhatFloatSecondsLoseOnAHugeLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	start := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	for range 20000 {
		d := time.Duration(r.Int64N(1<<51-1) + 1)
		require.Equal(t, d, secondsDuration(d.Seconds()), "%d ns", d)
		require.Zero(t, limitSlack(d.Seconds()))
		e := capRecord(start, d, d)
		_, _, ok := replayCallDeadline(e, e.CallsInFlight[0])
		require.True(t, ok, "fired at its cap of %d ns", d)
		e = capRecord(start, d, d-1)
		_, _, ok = replayCallDeadline(e, e.CallsInFlight[0])
		require.False(t, ok, "fired 1 ns before its cap of %d ns", d)
	}
	for range 20000 {
		d := time.Duration(r.Int64N(1<<62-1<<51) + 1<<51)
		slack := limitSlack(d.Seconds())
		require.Positive(t, slack)
		assert.LessOrEqual(t, slack, 2*time.Microsecond, "%d ns", d)
		e := capRecord(start, d, d)
		_, derived, ok := replayCallDeadline(e, e.CallsInFlight[0])
		require.True(t, ok, "fired at its cap of %d ns: %s", d, derived)
		assert.LessOrEqual(t, (secondsDuration(d.Seconds()) - d).Abs(), slack, "%d ns", d)
		e = capRecord(start, d, secondsDuration(d.Seconds())-slack-1)
		_, _, ok = replayCallDeadline(e, e.CallsInFlight[0])
		require.False(t, ok, "fired more than the slack before its cap of %d ns", d)
	}
}
