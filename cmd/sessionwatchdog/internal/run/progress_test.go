//go:build unix

package run

import (
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The progress line is read off the session's snapshot: elapsed and
// budget, the three freshest channels with their ages, the calls in
// flight, and when the session stops at the earliest, by which rule.
func TestTheProgressLineShowsTheFreshestChannelsCallsAndTheEarliestStop(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	sn := watchdog.Snapshot{SessionID: "job", WindowStartedAt: t0, At: t0.Add(90 * time.Second), Deadline: t0.Add(time.Hour),
		Evidence: []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: at(80 * time.Second)}, {Channel: "mcp_tool", LastAt: at(89 * time.Second)},
			{Channel: "subagent"}, {Channel: "workspace", LastAt: at(85 * time.Second)}, {Channel: "stderr", LastAt: at(10 * time.Second)}},
		CallsInFlight: 2, StopAt: t0.Add(150 * time.Second), StopRule: "idle"}
	want := "[sessionwatchdog] job 1m30s of 1h0m0s · mcp_tool 1s ago, workspace 5s ago, stdout 10s ago · 2 call(s) in flight · stops in 1m0s at the earliest (idle)"
	if got := progressLine(sn); got != want {
		t.Errorf("progress line\n got %q\nwant %q", got, want)
	}
	if got := progressLine(watchdog.Snapshot{SessionID: "job", At: t0, WindowStartedAt: t0, Deadline: t0.Add(time.Minute)}); got != "[sessionwatchdog] job 0s of 1m0s · no evidence yet" {
		t.Errorf("no evidence: %q", got)
	}
}
