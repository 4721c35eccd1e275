package top

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog/live"
)

// BenchmarkWriteText is a refresh's table of 10,000 rows.
//
//	go test -run '^$' -bench WriteText ./internal/top
func BenchmarkWriteText(b *testing.B) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	l := live.List{At: at}
	for i := range 10_000 {
		l.Rows = append(l.Rows, live.Row{Session: fmt.Sprintf("agent-%05d", i), Window: 1, Owner: "build7-4242-1a2b3c4d",
			WindowStartedAt: at.Add(-time.Minute), ElapsedSeconds: 60, BudgetSeconds: 3600, StopAt: at.Add(time.Hour), StopRule: "idle",
			Freshest: "stdout", FreshestAt: at.Add(-time.Second), CallsInFlight: 1, OldestCall: "Bash", FactsAt: at.Add(-time.Second),
			LastVerdict: &live.Verdict{At: at.Add(-2 * time.Second), Verdict: "CONTINUE", Rule: "idle"}})
	}
	for b.Loop() {
		if err := WriteText(io.Discard, l, Options{Source: "postgres:watchdog_events"}); err != nil {
			b.Fatal(err)
		}
	}
}
