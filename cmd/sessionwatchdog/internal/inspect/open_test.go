package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The open windows of a log: the ones with no terminal event, with their
// owner, deadline (wall clock from the window's start, or the session
// ceiling when earlier) and lease.
func TestOpenWindowsListsTheWindowsNobodyEndedWithTheirDeadlineAndLease(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	ev := func(id, kind string, window int, winStart time.Time, owner string, p *watchdog.Policy) watchdog.Event {
		return watchdog.Event{ID: id + kind, AggregateID: id, Kind: kind, Window: window, SessionStartedAt: t0,
			WindowStartedAt: winStart, OccurredAt: winStart, Owner: owner, Policy: p}
	}
	events := []watchdog.Event{
		ev("late", watchdog.KindStart, 1, t0, "o1", &watchdog.Policy{WallClock: time.Hour}),
		ev("ended", watchdog.KindStart, 1, t0, "o1", &watchdog.Policy{}),
		ev("ended", watchdog.KindStop, 1, t0, "o1", nil),
		ev("orphan", watchdog.KindStart, 1, t0, "o2", &watchdog.Policy{}),
		ev("orphan", watchdog.KindStop, 1, t0, "o2", nil),
		ev("orphan", watchdog.KindResume, 2, t0.Add(90*time.Minute), "dead", &watchdog.Policy{SessionCeiling: 2 * time.Hour}),
	}
	now := t0.Add(100 * time.Minute)
	leases := map[string]Lease{"dead": {ExpiresAt: now.Add(-10 * time.Second), LastSeen: now.Add(-16 * time.Second)},
		"o1": {ExpiresAt: now.Add(4 * time.Second), LastSeen: now.Add(-2 * time.Second)}}
	r := OpenWindows(events, now, leases, Filter{})
	if len(r.Open) != 2 || r.PastDeadline != 1 || r.LeaseExpired != 1 {
		t.Fatalf("report %+v: want 2 open windows, 1 past its deadline, 1 with an expired lease", r)
	}
	late, orphan := r.Open[0], r.Open[1]
	if late.Session != "late" || !late.PastDeadline || !late.Deadline.Equal(t0.Add(time.Hour)) || late.Lease.Expired {
		t.Errorf("late: %+v", late)
	}
	if orphan.Session != "orphan" || orphan.Window != 2 || orphan.Owner != "dead" || orphan.PastDeadline ||
		!orphan.Deadline.Equal(t0.Add(2*time.Hour)) || !orphan.Lease.Expired {
		t.Errorf("orphan: %+v (the session ceiling, from the session's start, comes before the window's 4 h)", orphan)
	}
	var b bytes.Buffer
	if err := WriteOpenText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 open windows", "1 past their deadline", "1 whose owner's lease has expired",
		"past deadline by 40m0s", "due in 20m0s", "expired 10s ago", "live until"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	if r := OpenWindows(events, now, nil, Filter{Sessions: []string{"ended"}}); len(r.Open) != 0 {
		t.Errorf("an ended session is not open: %+v", r.Open)
	}
}

// The timeline says who opened each window, who adopted it from which lost
// owner (last seen when, evidence continued or counted again) and who
// amended a policy and why, who stopped a session and why; a remote worker's checkpoint, and where a
// budget of supervised time counts from.
func TestTheTimelineNamesOwnersAdoptionsAndAmends(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	p := &watchdog.Policy{WallClock: time.Hour, WorkspaceRoot: "/srv/agent"}
	last := t0.Add(2 * time.Second)
	events := []watchdog.Event{
		{ID: "1", AggregateID: "a", Kind: watchdog.KindStart, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0, Owner: "o1", Policy: p},
		{ID: "1d", AggregateID: "a", Kind: watchdog.KindDecision, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(5 * time.Second),
			Rule: "wall_clock", Mode: watchdog.ModeShadow, CallsInFlight: []watchdog.CallInFlight{
				{Name: "web_search", Layer: watchdog.LayerHandler, StartedAt: t0.Add(time.Second), BudgetSeconds: 60, IdleSeconds: 30, Progress: 5, ProgressAt: t0.Add(3 * time.Second)},
				{Name: "bash", Layer: watchdog.LayerHandler, StartedAt: t0.Add(4 * time.Second), BudgetSeconds: 10}}},
		{ID: "1c", AggregateID: "a", Kind: watchdog.KindCheckpoint, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: last,
			EvidenceSummary: []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &last, Counter: 3}}},
		{ID: "2", AggregateID: "a", Kind: watchdog.KindResume, BudgetFrom: t0.Add(6 * time.Second), Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(8 * time.Second),
			Owner: "o2", AdoptedFrom: "o1", OwnerLastSeen: last, Reason: watchdog.StopOwnerLost, Policy: p,
			EvidenceSummary: []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &last, Counter: 3}}},
		{ID: "3", AggregateID: "a", Kind: watchdog.KindStop, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(9 * time.Second), Reason: watchdog.StopAmended},
		{ID: "4", AggregateID: "a", Kind: watchdog.KindResume, Window: 2, SessionStartedAt: t0, WindowStartedAt: t0.Add(9 * time.Second), OccurredAt: t0.Add(9 * time.Second),
			Owner: "o2", By: "alice", Why: "less time", Policy: p},
		{ID: "5", AggregateID: "a", Kind: watchdog.KindStop, Window: 2, SessionStartedAt: t0, WindowStartedAt: t0.Add(9 * time.Second), OccurredAt: t0.Add(19 * time.Second),
			Reason: watchdog.StopRequested, By: "bob@oncall", Why: "runaway tool loop"},
		{ID: "5c", AggregateID: "a", Kind: watchdog.KindCallCompleted, Window: 2, SessionStartedAt: t0, WindowStartedAt: t0.Add(9 * time.Second), OccurredAt: t0.Add(11 * time.Second),
			Handler: "bash", Layer: "handler", MeasureSeconds: 1.5, LimitSeconds: 10, Reason: "error", Error: "exit status 2"},
		{ID: "5k", AggregateID: "a", Kind: watchdog.KindProcessKilled, Window: 2, SessionStartedAt: t0, WindowStartedAt: t0.Add(9 * time.Second), OccurredAt: t0.Add(21 * time.Second),
			Handler: "claude", Reason: "sigkill", LimitSeconds: 2, ProcessesAlive: 3},
		{ID: "6", AggregateID: "a", Kind: watchdog.KindCheckpoint, Window: 2, SessionStartedAt: t0, WindowStartedAt: t0.Add(9 * time.Second), OccurredAt: t0.Add(12 * time.Second),
			Owner: "o2", ProgressValue: 7, Payload: []byte(`{"step":"lint"}`)},
	}
	var b bytes.Buffer
	if err := WriteText(&b, Build(events, Filter{})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"owner o1", "owner o2; adopted from o1 (last seen 2026-11-25T09:00:02.000Z); evidence continued from the window's records",
		"policy amended by alice: less time", `workspace "/srv/agent" watched, ignoring .git (the top level of .git still watched: git operations count)`, "stop_requested", "stopped by bob@oncall: runaway tool loop", `call in flight "web_search" (handler, running 4s, cap 1m0s, idle 30s, progress 5 2s ago)`,
		`call in flight "bash" (handler, running 1s, cap 10s, no progress)`, `handler "bash" ran 1.5s of cap 10s: error (exit status 2)`,
		`command "claude": 3 process(es) outlived the 2s grace after SIGTERM and were sent SIGKILL`, `progress saved: 7, payload {"step":"lint"}`, "evidence of window 1 as a remote worker saw it",
		"budget counts supervised time, from 2026-11-25T09:00:06.000Z"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, b.String())
		}
	}
}

// The timeline says which limit of a call was hit, idle or cap, and the
// last progress with its age.
func TestTheTimelineNamesACallsIdleLimitAndItsLastProgress(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	events := []watchdog.Event{
		{ID: "1", AggregateID: "a", Kind: watchdog.KindStart, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0},
		{ID: "2", AggregateID: "a", Kind: watchdog.KindHandlerDeadline, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0,
			OccurredAt: t0.Add(900 * time.Millisecond), Rule: "handler_idle", Reason: "handler_idle_exceeded", Handler: "build", Layer: "handler",
			MeasureSeconds: 0.5, LimitSeconds: 0.5, ProgressValue: 3, ProgressAt: t0.Add(400 * time.Millisecond)},
	}
	var b bytes.Buffer
	if err := WriteText(&b, Build(events, Filter{})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"idle handler", `handler "build" made no progress for 500ms of idle budget 500ms`, "last progress 3 at 2026-11-25T09:00:00.400Z (500ms before)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, b.String())
		}
	}
}

// A verdict lists at most 100 calls in flight: the timeline says how many
// more there were.
func TestTheTimelineSaysHowManyCallsACappedListLeftOut(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	calls := make([]watchdog.CallInFlight, 100)
	for i := range calls {
		calls[i] = watchdog.CallInFlight{Name: "tool", Layer: watchdog.LayerHandler, StartedAt: t0, BudgetSeconds: 60}
	}
	events := []watchdog.Event{
		{ID: "1", AggregateID: "a", Kind: watchdog.KindStart, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0},
		{ID: "2", AggregateID: "a", Kind: watchdog.KindVerdict, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(time.Second),
			Rule: "idle", HandlersInFlight: 1500, CallsInFlight: calls},
	}
	var b bytes.Buffer
	if err := WriteText(&b, Build(events, Filter{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "and 1400 more call(s) in flight, not listed") {
		t.Errorf("timeline does not count the calls left out:\n%s", b.String())
	}
}
