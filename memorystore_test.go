package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// fullEvents returns two events of session agg that set every field, the
// second with instants as a caller may give them (a monotonic reading,
// other locations, a zero instant behind a pointer) and empty slices and
// maps that are not nil.
func fullEvents(agg string) []watchdog.Event {
	yes, no := true, false
	last := t0.Add(-time.Minute)
	e := watchdog.Event{
		ID: "full-1", AggregateID: agg, Kind: watchdog.KindDecision, Window: 3, Reason: "wall_clock_exceeded",
		SessionStartedAt: t0.Add(-time.Hour), WindowStartedAt: t0.Add(-time.Minute), OccurredAt: t0.Add(time.Nanosecond),
		FiredAt: t0.Add(2 * time.Nanosecond), ElapsedSeconds: 60.000000001, ConfiguredBudgetSeconds: 60,
		Rule: "wall_clock", Mode: watchdog.ModeAct, Recoverable: &yes, MeasureSeconds: 60.000000001, LimitSeconds: 60,
		DecidedByDecisionID: "other-prefix-77",
		EvidenceSummary: []watchdog.EvidenceEntry{
			{Channel: "stdout"}, {Channel: "mcp_tool", LastAt: &last, Counter: 12}, {Channel: "custom", Counter: 1},
		},
		ActiveChannel: "mcp_tool", SettleCount: 1, SettleChecks: 3, ChildrenWaitSeconds: 0.5, Error: "boom: \"quoted\"\n",
		Handler: "tool.search", Layer: "handler", DyingSpan: "fetch page 3", ProgressValue: 1 << 40, ProgressAt: t0.Add(-time.Second),
		Payload: json.RawMessage(`{"step":7}`), Attempt: 2, ProcessesAlive: 4, Generation: 9, HandlersInFlight: 1, Waiting: true,
		CallsInFlight: []watchdog.CallInFlight{
			{Name: "tool.search", Layer: watchdog.LayerHandler, StartedAt: t0.Add(-30 * time.Second), BudgetSeconds: 30,
				IdleSeconds: 10, FirstProgressSeconds: 5, Progress: 3, ProgressAt: t0.Add(-20 * time.Second)},
			{Name: "phase", Layer: watchdog.LayerPhase, StartedAt: t0.Add(-time.Minute)},
		},
		ObservedSince: t0.Add(-time.Minute), GraceUntil: t0.Add(time.Minute),
		Policy:      &watchdog.Policy{WallClock: time.Minute, Channels: []string{"custom"}, RuleModes: map[string]watchdog.Mode{"idle": watchdog.ModeShadow}},
		OpensWindow: true, Owner: "0123456789ab", AdoptedFrom: "ba9876543210", OwnerLastSeen: t0.Add(-5 * time.Second),
		BudgetFrom: t0.Add(-50 * time.Second), By: "operator", Why: "maintenance",
		Extra: map[string]json.RawMessage{"x_future": json.RawMessage(`[1,2]`)},
	}
	zero, paris := time.Time{}, time.FixedZone("CEST", 2*3600)
	f := e
	f.ID, f.Kind, f.Recoverable, f.ElapsedSeconds = "full-2", watchdog.KindCancel, &no, math.Copysign(0, -1)
	f.OccurredAt = time.Now() // local, with a monotonic reading
	f.SessionStartedAt, f.WindowStartedAt = t0.In(paris), t0.Local()
	f.FiredAt = time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC) // beyond int64 nanoseconds
	f.EvidenceSummary = []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &zero}}
	f.CallsInFlight, f.Payload, f.Extra = []watchdog.CallInFlight{}, nil, map[string]json.RawMessage{}
	f.Policy = nil
	return []watchdog.Event{e, f}
}

// The MemoryStore gives back every event as it was appended, field for
// field (instants with their location and monotonic reading; nil and empty
// apart), with its Seq: from Load, to a subscriber, and after the log was
// compacted.
func TestMemoryStoreGivesBackEventsAsAppended(t *testing.T) {
	ctx := context.Background()
	m, err := watchdog.NewMemoryStoreWithRetention(watchdog.Retention{KeepWindows: 1})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := m.Subscribe(sctx, "full")
	if err != nil {
		t.Fatal(err)
	}
	want := fullEvents("full")
	for i := range want {
		if err := m.Append(ctx, want[i]); err != nil {
			t.Fatal(err)
		}
		want[i].Seq = uint64(i + 1)
	}
	check := func(what string, got []watchdog.Event) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s: event %d:\n got %#v\nwant %#v", what, i, got[i], want[i])
			}
		}
		if math.Signbit(got[1].ElapsedSeconds) != true {
			t.Fatalf("%s: -0 came back as +0", what)
		}
	}
	check("Load", load(t, m, "full"))
	check("Subscribe", []watchdog.Event{testwait.For(t, ch, "the first event from Subscribe"), testwait.For(t, ch, "the second event from Subscribe")})
	// Forget enough windows of another session that the log is compacted.
	for w := 1; w <= 2100; w++ {
		id := "other-" + strconv.Itoa(w)
		if err := m.Append(ctx, watchdog.Event{ID: id, AggregateID: "other", Kind: watchdog.KindStop, Window: w, OccurredAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if n, live := watchdog.MemoryStoreSize(m); n > 2*1024+2*live {
		t.Fatalf("the log was not compacted: %d records, %d kept", n, live)
	}
	check("Load after compaction", load(t, m, "full"))
	// Loaded events are the caller's.
	got := load(t, m, "full")
	got[0].Extra["x_future"] = json.RawMessage(`0`)
	*got[0].Recoverable = false
	got[0].EvidenceSummary[1].Counter = 0
	check("Load after changing a loaded copy", load(t, m, "full"))
}

// The store validates each event as Event.Validate does, with the same
// error, though it validates a policy it has validated before only once.
func TestMemoryStoreRefusesAsValidate(t *testing.T) {
	ctx := context.Background()
	m := watchdog.NewMemoryStore()
	good := watchdog.Policy{WallClock: time.Second, Channels: []string{"custom"}}
	start := func(id string, p *watchdog.Policy) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: "s-" + id, Kind: watchdog.KindStart, Window: 1, OccurredAt: t0, Policy: p}
	}
	if err := m.Append(ctx, start("a", &good)); err != nil {
		t.Fatal(err)
	}
	same := good
	same.Channels = []string{"custom"}
	badText := start("b", &same)
	badText.Reason = "not UTF-8 \xff"
	badPolicy := good
	badPolicy.Channels = []string{"custom", "custom"}
	badBoth := start("d", &badPolicy)
	badBoth.ElapsedSeconds = math.NaN()
	mutated := start("e", &good)
	for _, e := range []watchdog.Event{badText, start("c", &badPolicy), badBoth, mutated} {
		if e.ID == "e" {
			good.WallClock = -time.Second // the policy validated before, changed in place
		}
		want := e.Validate()
		err := m.Append(ctx, e)
		if want == nil || err == nil || err.Error() != want.Error() || !errors.Is(err, watchdog.ErrInvalidEvent) {
			t.Fatalf("event %s: Append's error %v, Validate's %v", e.ID, err, want)
		}
	}
	if err := m.Append(ctx, start("f", &same)); err != nil {
		t.Fatal(err)
	}
}
