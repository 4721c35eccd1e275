package decide

import (
	"testing"
	"time"
)

func TestDecideOverFixedInstants(t *testing.T) {
	start := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	budget := 10 * time.Second
	tests := []struct {
		name       string
		now        time.Time
		wantAction Action
		wantNext   time.Time
	}{
		{"at the start", start, Continue, start.Add(budget + 1)},
		{"half way", start.Add(5 * time.Second), Continue, start.Add(budget + 1)},
		{"exactly at the budget is not an overrun", start.Add(budget), Continue, start.Add(budget + 1)},
		{"one nanosecond past fires", start.Add(budget + 1), Cancel, time.Time{}},
		{"long past fires", start.Add(time.Hour), Cancel, time.Time{}},
		{"clock before the start (skew) continues", start.Add(-time.Minute), Continue, start.Add(budget + 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(Limits{WallClock: budget}, Snapshot{WindowStartedAt: start}, tt.now)
			if v.Action != tt.wantAction || !v.Next.Equal(tt.wantNext) {
				t.Fatalf("Decide = %+v, want action %v next %v", v, tt.wantAction, tt.wantNext)
			}
			if v.Elapsed != tt.now.Sub(start) || v.Budget != budget {
				t.Fatalf("Elapsed/Budget = %v/%v", v.Elapsed, v.Budget)
			}
			if (v.Action == Cancel) != (v.Reason == ReasonWallClockExceeded) {
				t.Fatalf("reason %q for action %v", v.Reason, v.Action)
			}
		})
	}
}

func TestDecideIsPure(t *testing.T) {
	start := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	l, s, now := Limits{WallClock: time.Second}, Snapshot{WindowStartedAt: start}, start.Add(2*time.Second)
	if a, b := Decide(l, s, now), Decide(l, s, now); a != b {
		t.Fatalf("same inputs, different verdicts: %+v vs %+v", a, b)
	}
}
