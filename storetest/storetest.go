// Package storetest is the conformance suite for watchdog.EventStore
// implementations. A store passes when
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) watchdog.EventStore { return newMyStore(t) })
//	}
//
// passes under go test -race. The memory, file and PostgreSQL stores of this
// repository all run it; third-party stores can too.
//
// The suite checks the contract documented on watchdog.EventStore and
// watchdog.Subscriber: append and load order per aggregate, store-assigned
// strictly increasing Seq, atomic batches, idempotent re-append by event_id,
// exactly one terminal event per (aggregate_id, window) under racing writers,
// refusal of invalid and hostile events (classified per event, see below),
// context cancellation, large payloads, unknown JSON fields kept in
// Event.Extra, and, for a store that implements watchdog.Subscriber,
// subscriptions that deliver every later event in order without a slow
// reader blocking Append. Subscription subtests are skipped
// for a store that is not a Subscriber; for a store that implements
// watchdog.EachAppender, per-event results of AppendEach (a lost terminal
// race or a refused event spares the rest of its batch) under racing
// writers, skipped for a store that is not one; and for a store that
// arbitrates window openings (watchdog.Arbiter), one opening per window
// under racing writers.
//
// Refusals are classified per event. An event that the store can never
// record (hostile input: text too long for an index, invalid UTF-8, a NUL
// where the store cannot keep one, what Event.Validate refuses) is refused
// with an error wrapping watchdog.ErrInvalidEvent, the same on every retry,
// never with another error: the Watchdog's recorder retries any other error
// until Close. A batch that holds such an event is refused whole (batches
// are atomic), with an error that names the refused event by its event_id,
// and the store holds nothing against the batch's other events: appended
// without it, they are recorded. Events that some stores can keep and
// others cannot (invalid UTF-8 inside an Extra value, for instance) are
// either recorded unchanged or refused that way.
//
// Every subtest uses aggregate and event ids unique to the Run call, so
// newStore may hand out stores that share state (for example one database)
// across subtests. The suite never sleeps to wait for a store: it waits on
// channels and fails a subtest that gets no answer within Timeout.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Timeout bounds every wait of the suite on the store (a subscription
// delivery, a channel close). Exceeding it fails the subtest; it is a guard
// against a hung store, never a way to wait for one. Default 30 s.
var Timeout = 30 * time.Second

// Run runs the conformance suite as subtests of t. newStore is called once
// per subtest and must return a ready store; it should register its own
// cleanup (t.Cleanup) to close the store. Run does not call t.Parallel.
func Run(t *testing.T, newStore func(t *testing.T) watchdog.EventStore) {
	t.Helper()
	if newStore == nil {
		t.Fatal("storetest.Run: nil newStore")
	}
	g := &gen{prefix: randomPrefix(t)}
	tests := []struct {
		name string
		fn   func(*testing.T, *gen, watchdog.EventStore)
	}{
		{"AppendLoadOrder", testAppendLoadOrder},
		{"LoadUnknownAggregate", testLoadUnknown},
		{"SeqStrictlyIncreasing", testSeqIncreasing},
		{"EventFieldsRoundTrip", testFieldsRoundTrip},
		{"UnknownFieldsPreserved", testUnknownFields},
		{"LargePayload", testLargePayload},
		{"IdempotentReappend", testIdempotent},
		{"TerminalArbitration", testTerminalArbitration},
		{"TwoTerminalsInOneBatch", testTwoTerminalsInBatch},
		{"AtomicBatchRefusal", testAtomicBatch},
		{"InvalidEventsRefused", testInvalid},
		{"HostileEventsRefusedForGood", testHostile},
		{"RefusedEventSparesTheRestOfItsBatch", testRefusalPerEvent},
		{"ConcurrentAppends", testConcurrentAppends},
		{"RacingTerminals", testRacingTerminals},
		{"ContextCancellation", testContextCancel},
		{"SubscribeDeliversLaterEventsInOrder", testSubscribeOrder},
		{"SubscribeSlowReaderNeverBlocksAppend", testSubscribeSlowReader},
		{"SubscribeConcurrentWriters", testSubscribeConcurrent},
		{"SubscribeSkipsRefusedBatches", testSubscribeRefused},
		{"SubscribeEndsWithContext", testSubscribeEnds},
		{"AppendEachRecordsEveryEvent", testEachAllRecorded},
		{"AppendEachLostTerminalSparesTheBatch", testEachLostTerminalSparesTheBatch},
		{"AppendEachTwoTerminalsInOneBatch", testEachTwoTerminalsInOneBatch},
		{"AppendEachRefusalSparesTheBatch", testEachRefusalSparesTheBatch},
		{"AppendEachRacingTerminals", testEachRacingTerminals},
		{"AppendEachSubscribe", testEachSubscribe},
		{"OpeningArbitration", testOpeningArbitration},
		{"RacingOpenings", testRacingOpenings},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("newStore returned nil")
			}
			tc.fn(t, g, s)
		})
	}
}

// gen makes events with ids unique to one Run.
type gen struct {
	prefix string
	n      atomic.Uint64
}

func randomPrefix(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("storetest: random prefix: %v", err)
	}
	return "st" + hex.EncodeToString(b[:])
}

// agg returns a fresh aggregate id.
func (g *gen) agg(name string) string {
	return fmt.Sprintf("%s-%s-%d", g.prefix, name, g.n.Add(1))
}

var base = time.Date(2026, 5, 23, 9, 0, 0, 123456789, time.UTC)

// event returns a valid event of aggregate agg.
func (g *gen) event(agg, kind string, window int) watchdog.Event {
	n := g.n.Add(1)
	occurred := base.Add(time.Duration(n) * time.Millisecond)
	e := watchdog.Event{
		ID:                      fmt.Sprintf("%s-e%d", g.prefix, n),
		AggregateID:             agg,
		Kind:                    kind,
		Window:                  window,
		SessionStartedAt:        base,
		WindowStartedAt:         base,
		OccurredAt:              occurred,
		ElapsedSeconds:          occurred.Sub(base).Seconds(),
		ConfiguredBudgetSeconds: 10,
	}
	switch kind {
	case watchdog.KindCancel:
		e.Reason = "wall_clock_exceeded"
		e.FiredAt = occurred
	case watchdog.KindStop:
		e.Reason = watchdog.StopCompleted
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*Timeout)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, s watchdog.EventStore, evs ...watchdog.Event) {
	t.Helper()
	if err := s.Append(ctxT(t), evs...); err != nil {
		t.Fatalf("Append(%d events): %v", len(evs), err)
	}
}

func mustLoad(t *testing.T, s watchdog.EventStore, agg string) []watchdog.Event {
	t.Helper()
	evs, err := s.Load(ctxT(t), agg)
	if err != nil {
		t.Fatalf("Load(%q): %v", agg, err)
	}
	return evs
}

func ids(evs []watchdog.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func sameIDs(t *testing.T, what string, got, want []watchdog.Event) {
	t.Helper()
	g, w := ids(got), ids(want)
	if strings.Join(g, ",") != strings.Join(w, ",") {
		t.Fatalf("%s: event ids\n got %v\nwant %v", what, g, w)
	}
}

func checkSeqIncreasing(t *testing.T, what string, evs []watchdog.Event) {
	t.Helper()
	var prev uint64
	for i, e := range evs {
		if e.Seq == 0 {
			t.Fatalf("%s: event %d (%s) has Seq 0; the store must assign it", what, i, e.ID)
		}
		if e.Seq <= prev {
			t.Fatalf("%s: event %d (%s) has Seq %d after Seq %d; want strictly increasing", what, i, e.ID, e.Seq, prev)
		}
		prev = e.Seq
	}
}

// canon is e as JSON with Seq cleared and Extra compacted, for comparison.
func canon(t *testing.T, e watchdog.Event) string {
	t.Helper()
	e.Seq = 0
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatalf("marshal %s: %v", e.ID, err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("unmarshal %s: %v", e.ID, err)
	}
	b, _ = json.Marshal(v) // map keys sorted, whitespace gone
	return string(b)
}

func sameEvent(t *testing.T, got, want watchdog.Event) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); g != w {
		if len(g) > 2000 {
			g, w = g[:1000]+"..."+g[len(g)-200:], w[:1000]+"..."+w[len(w)-200:]
		}
		t.Fatalf("event %s changed in the store:\n got %s\nwant %s", want.ID, g, w)
	}
}

func testAppendLoadOrder(t *testing.T, g *gen, s watchdog.EventStore) {
	a, b := g.agg("a"), g.agg("b")
	var wantA, wantB []watchdog.Event
	for i := range 5 {
		ea := g.event(a, watchdog.KindResume, 1)
		eb := g.event(b, watchdog.KindResume, 1)
		if i == 0 {
			ea.Kind, eb.Kind = watchdog.KindStart, watchdog.KindStart
		}
		mustAppend(t, s, ea)
		mustAppend(t, s, eb)
		wantA, wantB = append(wantA, ea), append(wantB, eb)
	}
	// A batch keeps its order too.
	batch := []watchdog.Event{g.event(a, watchdog.KindResume, 2), g.event(b, watchdog.KindResume, 2), g.event(a, watchdog.KindCancel, 2)}
	mustAppend(t, s, batch...)
	wantA = append(wantA, batch[0], batch[2])
	wantB = append(wantB, batch[1])

	gotA, gotB := mustLoad(t, s, a), mustLoad(t, s, b)
	sameIDs(t, "Load(a)", gotA, wantA)
	sameIDs(t, "Load(b)", gotB, wantB)
	checkSeqIncreasing(t, "Load(a)", gotA)
	checkSeqIncreasing(t, "Load(b)", gotB)
	for _, e := range gotA {
		if e.AggregateID != a {
			t.Fatalf("Load(a) returned event %s of aggregate %q", e.ID, e.AggregateID)
		}
	}
}

func testLoadUnknown(t *testing.T, g *gen, s watchdog.EventStore) {
	if evs := mustLoad(t, s, g.agg("never")); len(evs) != 0 {
		t.Fatalf("Load of an unknown aggregate: %d events, want 0", len(evs))
	}
}

func testSeqIncreasing(t *testing.T, g *gen, s watchdog.EventStore) {
	a, b := g.agg("a"), g.agg("b")
	mustAppend(t, s, g.event(a, watchdog.KindStart, 1))
	mustAppend(t, s, g.event(b, watchdog.KindStart, 1), g.event(b, watchdog.KindResume, 1))
	mustAppend(t, s, g.event(a, watchdog.KindResume, 1))
	ea, eb := mustLoad(t, s, a), mustLoad(t, s, b)
	if len(ea) != 2 || len(eb) != 2 {
		t.Fatalf("loaded %d and %d events, want 2 and 2", len(ea), len(eb))
	}
	// Across aggregates, Seq follows the append order.
	order := []watchdog.Event{ea[0], eb[0], eb[1], ea[1]}
	checkSeqIncreasing(t, "Seq across aggregates in append order", order)
	// The caller's copy is not the store's: Seq given by the caller is ignored.
	e := g.event(a, watchdog.KindResume, 1)
	e.Seq = 1
	mustAppend(t, s, e)
	got := mustLoad(t, s, a)
	if last := got[len(got)-1]; last.Seq <= ea[1].Seq {
		t.Fatalf("an event appended with Seq 1 was stored with Seq %d after Seq %d; the store must assign Seq", last.Seq, ea[1].Seq)
	}
}

func testFieldsRoundTrip(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("fields")
	start := g.event(a, watchdog.KindStart, 1)
	start.SessionStartedAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cancel := g.event(a, watchdog.KindCancel, 1)
	cancel.ElapsedSeconds = 10.000000001
	cancel.ConfiguredBudgetSeconds = 0.25
	// Any string survives, NUL and JSON's special characters included (a
	// store on PostgreSQL's jsonb, which refuses \u0000, would not).
	cancel.Reason = "quote \" backslash \\ newline \n tab \t nul \x00 html <&> unicode \u2603"
	mustAppend(t, s, start, cancel)
	got := mustLoad(t, s, a)
	if len(got) != 2 {
		t.Fatalf("loaded %d events, want 2", len(got))
	}
	sameEvent(t, got[0], start)
	sameEvent(t, got[1], cancel)
	if !got[0].SessionStartedAt.Equal(start.SessionStartedAt) {
		t.Fatalf("session_started_at: got %v, want %v", got[0].SessionStartedAt, start.SessionStartedAt)
	}
	if !got[1].Terminal() {
		t.Fatal("the loaded cancel is not Terminal()")
	}
}

func testUnknownFields(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("extra")
	e := g.event(a, watchdog.KindStart, 1)
	e.Extra = map[string]json.RawMessage{
		"x_future_field": json.RawMessage(`{"nested":[1,2.5,"three",null,true],"unicode":"h\u00e9 \u2603 \ud83d\ude00"}`),
		"x_number":       json.RawMessage(`12345678901234567890`),
		"x_string":       json.RawMessage(`"line\nbreak\ttab \"quoted\" \\ back"`),
	}
	mustAppend(t, s, e)
	got := mustLoad(t, s, a)
	if len(got) != 1 {
		t.Fatalf("loaded %d events, want 1", len(got))
	}
	for k, v := range e.Extra {
		gv, ok := got[0].Extra[k]
		if !ok {
			t.Fatalf("unknown field %q was dropped by the store (Extra: %v)", k, got[0].Extra)
		}
		var want, have any
		dec := func(b []byte, into *any) {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			if err := d.Decode(into); err != nil {
				t.Fatalf("extra field %q: %v", k, err)
			}
		}
		dec(v, &want)
		dec(gv, &have)
		wb, _ := json.Marshal(want)
		hb, _ := json.Marshal(have)
		if !bytes.Equal(wb, hb) {
			t.Fatalf("unknown field %q changed: got %s, want %s", k, gv, v)
		}
	}
	sameEvent(t, got[0], e)
}

func testLargePayload(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("large")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	raw, _ := json.Marshal(string(big))
	e := g.event(a, watchdog.KindStart, 1)
	e.Extra = map[string]json.RawMessage{"x_blob": raw}
	small := g.event(a, watchdog.KindResume, 1)
	mustAppend(t, s, e)
	mustAppend(t, s, small)
	got := mustLoad(t, s, a)
	if len(got) != 2 {
		t.Fatalf("loaded %d events, want 2", len(got))
	}
	var blob string
	if err := json.Unmarshal(got[0].Extra["x_blob"], &blob); err != nil {
		t.Fatalf("x_blob: %v", err)
	}
	if blob != string(big) {
		t.Fatalf("the 1 MiB field came back with %d bytes, want %d (or different content)", len(blob), len(big))
	}
	sameEvent(t, got[1], small)
}

func testIdempotent(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("idem")
	start := g.event(a, watchdog.KindStart, 1)
	cancel := g.event(a, watchdog.KindCancel, 1)
	mustAppend(t, s, start, cancel)
	before := mustLoad(t, s, a)

	// A retry of the same events, alone or in a batch with a new one, is a
	// no-op for the old ones: in particular a retried terminal event is not
	// refused as a second decision.
	mustAppend(t, s, start)
	mustAppend(t, s, cancel)
	resume := g.event(a, watchdog.KindResume, 2)
	mustAppend(t, s, start, resume, cancel)
	// The same event twice in one batch is recorded once.
	r2 := g.event(a, watchdog.KindResume, 2)
	mustAppend(t, s, r2, r2)

	got := mustLoad(t, s, a)
	sameIDs(t, "after re-appends", got, []watchdog.Event{start, cancel, resume, r2})
	for i := range before {
		if got[i].Seq != before[i].Seq {
			t.Fatalf("re-append changed the Seq of %s from %d to %d", got[i].ID, before[i].Seq, got[i].Seq)
		}
	}
	checkSeqIncreasing(t, "after re-appends", got)
}

func testTerminalArbitration(t *testing.T, g *gen, s watchdog.EventStore) {
	a, b := g.agg("a"), g.agg("b")
	mustAppend(t, s, g.event(a, watchdog.KindStart, 1), g.event(b, watchdog.KindStart, 1))
	stop := g.event(a, watchdog.KindStop, 1)
	mustAppend(t, s, stop)

	for _, kind := range []string{watchdog.KindCancel, watchdog.KindStop} {
		err := s.Append(ctxT(t), g.event(a, kind, 1))
		if !errors.Is(err, watchdog.ErrAlreadyDecided) {
			t.Fatalf("a second terminal event (%s) for window 1: err = %v, want one wrapping ErrAlreadyDecided", kind, err)
		}
	}
	// Other windows and other aggregates are independent; non-terminal
	// events of a decided window are still accepted.
	mustAppend(t, s, g.event(a, watchdog.KindResume, 1))
	mustAppend(t, s, g.event(a, watchdog.KindResume, 2), g.event(a, watchdog.KindCancel, 2))
	mustAppend(t, s, g.event(b, watchdog.KindCancel, 1))

	got := mustLoad(t, s, a)
	terminals := map[int][]string{}
	for _, e := range got {
		if e.Terminal() {
			terminals[e.Window] = append(terminals[e.Window], e.ID)
		}
	}
	if len(terminals[1]) != 1 || terminals[1][0] != stop.ID || len(terminals[2]) != 1 {
		t.Fatalf("terminal events per window: %v; want window 1 = [%s] and one in window 2", terminals, stop.ID)
	}
}

func testTwoTerminalsInBatch(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("batch2")
	start := g.event(a, watchdog.KindStart, 1)
	err := s.Append(ctxT(t), start, g.event(a, watchdog.KindStop, 1), g.event(a, watchdog.KindCancel, 1))
	if !errors.Is(err, watchdog.ErrAlreadyDecided) {
		t.Fatalf("a batch with two terminal events for one window: err = %v, want one wrapping ErrAlreadyDecided", err)
	}
	if got := mustLoad(t, s, a); len(got) != 0 {
		t.Fatalf("a refused batch left %d events: %v", len(got), ids(got))
	}
}

func testAtomicBatch(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("atomic")
	mustAppend(t, s, g.event(a, watchdog.KindStart, 1), g.event(a, watchdog.KindCancel, 1))
	before := mustLoad(t, s, a)

	// A batch whose last event loses the terminal race appends nothing.
	err := s.Append(ctxT(t), g.event(a, watchdog.KindResume, 1), g.event(a, watchdog.KindResume, 2), g.event(a, watchdog.KindStop, 1))
	if !errors.Is(err, watchdog.ErrAlreadyDecided) {
		t.Fatalf("batch with a losing terminal event: err = %v, want ErrAlreadyDecided", err)
	}
	// A batch with one invalid event appends nothing.
	bad := g.event(a, watchdog.KindResume, 2)
	bad.Window = 0
	err = s.Append(ctxT(t), g.event(a, watchdog.KindResume, 2), bad)
	if !errors.Is(err, watchdog.ErrInvalidEvent) {
		t.Fatalf("batch with an invalid event: err = %v, want ErrInvalidEvent", err)
	}
	after := mustLoad(t, s, a)
	sameIDs(t, "after refused batches", after, before)

	// The refused events were not recorded: the window is still open for a
	// terminal event of its own.
	mustAppend(t, s, g.event(a, watchdog.KindResume, 2), g.event(a, watchdog.KindStop, 2))
}

func testInvalid(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("invalid")
	cases := map[string]func(*watchdog.Event){
		"empty event_id":     func(e *watchdog.Event) { e.ID = "" },
		"empty aggregate_id": func(e *watchdog.Event) { e.AggregateID = "" },
		"empty event_kind":   func(e *watchdog.Event) { e.Kind = "" },
		"window 0":           func(e *watchdog.Event) { e.Window = 0 },
		"window -1":          func(e *watchdog.Event) { e.Window = -1 },
	}
	for name, mutate := range cases {
		e := g.event(a, watchdog.KindStart, 1)
		mutate(&e)
		if err := s.Append(ctxT(t), e); !errors.Is(err, watchdog.ErrInvalidEvent) {
			t.Errorf("%s: err = %v, want one wrapping ErrInvalidEvent", name, err)
		}
	}
	if got := mustLoad(t, s, a); len(got) != 0 {
		t.Fatalf("invalid events were recorded: %v", ids(got))
	}
}

// hostileCase is an event that no store can record (or, with mayStore,
// that some stores can), made from a valid one by mutate. A mutation of
// the event_id only adds to its end.
type hostileCase struct {
	name     string
	mutate   func(*watchdog.Event)
	mayStore bool // a store may record it unchanged instead of refusing it
}

// randomHex returns n random hex digits: text that compresses poorly, so
// that it stays too long for a database index.
func randomHex(t *testing.T, n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("storetest: random bytes: %v", err)
	}
	return hex.EncodeToString(b)[:n]
}

func hostileCases(t *testing.T) []hostileCase {
	long := randomHex(t, 6000) // past Event.Validate's 1,024 bytes and a PostgreSQL btree entry's 2,704
	extra := func(raw string) func(*watchdog.Event) {
		return func(e *watchdog.Event) { e.Extra = map[string]json.RawMessage{"x_hostile": json.RawMessage(raw)} }
	}
	return []hostileCase{
		{name: "window 0", mutate: func(e *watchdog.Event) { e.Window = 0 }},
		{name: "aggregate_id too long for an index", mutate: func(e *watchdog.Event) { e.AggregateID += long }},
		{name: "event_id too long for an index", mutate: func(e *watchdog.Event) { e.ID += long }},
		{name: "event_kind too long for an index", mutate: func(e *watchdog.Event) { e.Kind += long }},
		{name: "NUL in aggregate_id", mutate: func(e *watchdog.Event) { e.AggregateID += "\x00" }},
		{name: "NUL in event_id", mutate: func(e *watchdog.Event) { e.ID += "\x00" }},
		{name: "NUL in event_kind", mutate: func(e *watchdog.Event) { e.Kind += "\x00" }},
		{name: "invalid UTF-8 in aggregate_id", mutate: func(e *watchdog.Event) { e.AggregateID += "\xff\xfe" }},
		{name: "invalid UTF-8 in event_id", mutate: func(e *watchdog.Event) { e.ID += "\xc3\x28" }},
		{name: "invalid UTF-8 in event_kind", mutate: func(e *watchdog.Event) { e.Kind += "\xed\xa0\x80" }}, // an encoded surrogate
		{name: "invalid UTF-8 in reason", mutate: func(e *watchdog.Event) { e.Reason = "bad \xff reason" }},
		{name: "NaN elapsed_seconds", mutate: func(e *watchdog.Event) { e.ElapsedSeconds = math.NaN() }},
		{name: "extra key colliding with a field", mutate: func(e *watchdog.Event) { e.Extra = map[string]json.RawMessage{"Event_ID": json.RawMessage(`"x"`)} }},
		{name: "invalid UTF-8 in an extra value", mutate: extra("\"bad \xff value\""), mayStore: true},
		{name: "escaped NUL in an extra value", mutate: extra(`"nul \u0000 escaped"`), mayStore: true},
		{name: "lone surrogate in an extra value", mutate: extra(`"\ud800"`), mayStore: true},
	}
}

// checkRefusedForGood fails t unless err is a refusal for good of the
// event whose event_id begins with name (each case changes the id, if at
// all, after name): err wraps watchdog.ErrInvalidEvent and names it.
func checkRefusedForGood(t *testing.T, what, name string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: Append accepted it; want an error wrapping ErrInvalidEvent", what)
	case !errors.Is(err, watchdog.ErrInvalidEvent):
		t.Fatalf("%s: err = %v; want one wrapping ErrInvalidEvent (any other error is retried until Close)", what, err)
	case errors.Is(err, watchdog.ErrAlreadyDecided):
		t.Fatalf("%s: err = %v wraps ErrAlreadyDecided too; want ErrInvalidEvent only", what, err)
	case !strings.Contains(err.Error(), name):
		t.Fatalf("%s: err = %v; want it to name the refused event %s", what, err, name)
	}
}

func testHostile(t *testing.T, g *gen, s watchdog.EventStore) {
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			a := g.agg("hostile")
			bad := g.event(a, watchdog.KindResume, 1)
			bad.ID += "-hostile"
			name := bad.ID
			c.mutate(&bad)
			err := s.Append(ctxT(t), bad)
			if c.mayStore && err == nil {
				got := mustLoad(t, s, a)
				if len(got) != 1 {
					t.Fatalf("Append accepted the event, then Load returned %d events, want 1", len(got))
				}
				sameEvent(t, got[0], bad)
				return
			}
			checkRefusedForGood(t, "Append", name, err)
			// For good: a retry is refused the same way.
			checkRefusedForGood(t, "Append again", name, s.Append(ctxT(t), bad))
			if got := mustLoad(t, s, a); len(got) != 0 {
				t.Fatalf("a refused event left %d events: %v", len(got), ids(got))
			}
		})
	}
}

func testRefusalPerEvent(t *testing.T, g *gen, s watchdog.EventStore) {
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			a := g.agg("perevent")
			first, last := g.event(a, watchdog.KindStart, 1), g.event(a, watchdog.KindStop, 1)
			bad := g.event(a, watchdog.KindResume, 1)
			bad.ID += "-hostile"
			name := bad.ID
			c.mutate(&bad)
			err := s.Append(ctxT(t), first, bad, last)
			if c.mayStore && err == nil {
				sameIDs(t, "a batch accepted whole", mustLoad(t, s, a), []watchdog.Event{first, bad, last})
				return
			}
			checkRefusedForGood(t, "a batch holding it", name, err)
			if got := mustLoad(t, s, a); len(got) != 0 {
				t.Fatalf("a refused batch left %d events: %v", len(got), ids(got))
			}
			// The store holds nothing against the others: without the
			// refused event, the batch is recorded.
			mustAppend(t, s, first, last)
			got := mustLoad(t, s, a)
			sameIDs(t, "the batch without its refused event", got, []watchdog.Event{first, last})
			sameEvent(t, got[0], first)
			sameEvent(t, got[1], last)
		})
	}
}

func testConcurrentAppends(t *testing.T, g *gen, s watchdog.EventStore) {
	const writers, each = 8, 25
	shared := g.agg("shared")
	own := make([]string, writers)
	for i := range own {
		own[i] = g.agg(fmt.Sprintf("own%d", i))
	}
	sent := make([][]watchdog.Event, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e1 := g.event(shared, watchdog.KindResume, 1)
				e2 := g.event(own[w], watchdog.KindResume, 1)
				sent[w] = append(sent[w], e1, e2)
				var err error
				if i%2 == 0 {
					err = s.Append(context.Background(), e1, e2)
				} else if err = s.Append(context.Background(), e1); err == nil {
					err = s.Append(context.Background(), e2)
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := mustLoad(t, s, shared)
	if len(got) != writers*each {
		t.Fatalf("shared aggregate has %d events, want %d", len(got), writers*each)
	}
	checkSeqIncreasing(t, "shared aggregate", got)
	// Each writer's events appear in the order it appended them.
	pos := make(map[string]int, len(got))
	for i, e := range got {
		pos[e.ID] = i
	}
	for w := range writers {
		last := -1
		var mine []watchdog.Event
		for _, e := range sent[w] {
			if e.AggregateID != shared {
				mine = append(mine, e)
				continue
			}
			p, ok := pos[e.ID]
			if !ok {
				t.Fatalf("event %s of writer %d is missing", e.ID, w)
			}
			if p < last {
				t.Fatalf("writer %d's events are out of order in Load", w)
			}
			last = p
		}
		sameIDs(t, fmt.Sprintf("writer %d's own aggregate", w), mustLoad(t, s, own[w]), mine)
	}
}

func testRacingTerminals(t *testing.T, g *gen, s watchdog.EventStore) {
	const racers, windows = 16, 8
	a := g.agg("race")
	mustAppend(t, s, g.event(a, watchdog.KindStart, 1))
	var wins [windows + 1]atomic.Int32
	errs := make(chan error, racers*windows)
	var wg sync.WaitGroup
	startLine := make(chan struct{})
	for r := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startLine
			for w := 1; w <= windows; w++ {
				kind := watchdog.KindCancel
				if r%3 == 0 {
					kind = watchdog.KindStop
				}
				err := s.Append(context.Background(), g.event(a, kind, w))
				switch {
				case err == nil:
					wins[w].Add(1)
				case errors.Is(err, watchdog.ErrAlreadyDecided):
				default:
					errs <- fmt.Errorf("racer %d window %d: unexpected error %w", r, w, err)
				}
			}
		}()
	}
	close(startLine)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := 1; w <= windows; w++ {
		if n := wins[w].Load(); n != 1 {
			t.Errorf("window %d: %d racers were told they recorded the terminal event, want exactly 1", w, n)
		}
	}
	per := map[int]int{}
	for _, e := range mustLoad(t, s, a) {
		if e.Terminal() {
			per[e.Window]++
		}
	}
	for w := 1; w <= windows; w++ {
		if per[w] != 1 {
			t.Errorf("window %d has %d terminal events in the store, want exactly 1", w, per[w])
		}
	}
}

func testContextCancel(t *testing.T, g *gen, s watchdog.EventStore) {
	a := g.agg("ctx")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(ctx, g.event(a, watchdog.KindStart, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: err = %v, want one wrapping context.Canceled", err)
	}
	if _, err := s.Load(ctx, a); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load with a cancelled context: err = %v, want one wrapping context.Canceled", err)
	}
	if got := mustLoad(t, s, a); len(got) != 0 {
		t.Fatalf("Append with a cancelled context recorded %v", ids(got))
	}
	if sub, ok := s.(watchdog.Subscriber); ok {
		ch, err := sub.Subscribe(ctx, a)
		if err == nil {
			expectClosed(t, ch, "a subscription made with a cancelled context")
		}
	}
}

func subscriber(t *testing.T, s watchdog.EventStore) watchdog.Subscriber {
	t.Helper()
	sub, ok := s.(watchdog.Subscriber)
	if !ok {
		t.Skipf("%T does not implement watchdog.Subscriber", s)
	}
	return sub
}

func subscribe(t *testing.T, sub watchdog.Subscriber, agg string) (<-chan watchdog.Event, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := sub.Subscribe(ctx, agg)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", agg, err)
	}
	return ch, cancel
}

// receive reads n events from ch, failing after Timeout.
func receive(t *testing.T, ch <-chan watchdog.Event, n int) []watchdog.Event {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	out := make([]watchdog.Event, 0, n)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("subscription closed after %d of %d events", len(out), n)
			}
			out = append(out, e)
		case <-timer.C:
			t.Fatalf("subscription delivered %d of %d events within %v", len(out), n, Timeout)
		}
	}
	return out
}

func expectClosed(t *testing.T, ch <-chan watchdog.Event, what string) {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("%s: channel not closed within %v", what, Timeout)
		}
	}
}

func testSubscribeOrder(t *testing.T, g *gen, s watchdog.EventStore) {
	sub := subscriber(t, s)
	a, other := g.agg("sub"), g.agg("other")
	before := g.event(a, watchdog.KindStart, 1)
	mustAppend(t, s, before)
	ch, _ := subscribe(t, sub, a)
	ch2, _ := subscribe(t, sub, a) // every subscriber gets every event
	var want []watchdog.Event
	for i := range 10 {
		e := g.event(a, watchdog.KindResume, 1)
		if i == 9 {
			e = g.event(a, watchdog.KindCancel, 1)
		}
		mustAppend(t, s, g.event(other, watchdog.KindResume, 1), e)
		want = append(want, e)
	}
	for i, c := range []<-chan watchdog.Event{ch, ch2} {
		got := receive(t, c, len(want))
		if got[0].ID == before.ID {
			got = append(got[1:], receive(t, c, 1)...) // an earlier event may come first; never required
		}
		sameIDs(t, fmt.Sprintf("subscription %d", i+1), got, want)
		checkSeqIncreasing(t, fmt.Sprintf("subscription %d", i+1), got)
		for j := range got {
			sameEvent(t, got[j], want[j])
		}
	}
}

func testSubscribeSlowReader(t *testing.T, g *gen, s watchdog.EventStore) {
	sub := subscriber(t, s)
	a := g.agg("slow")
	ch, _ := subscribe(t, sub, a)
	// Nobody reads ch while 300 events are appended: Append must not block.
	const n = 300
	want := make([]watchdog.Event, 0, n)
	done := make(chan error, 1)
	go func() {
		for i := range n {
			e := g.event(a, watchdog.KindResume, 1)
			want = append(want, e)
			if err := s.Append(context.Background(), e); err != nil {
				done <- fmt.Errorf("append %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(Timeout):
		t.Fatalf("Append blocked for %v while a subscriber did not read", Timeout)
	}
	sameIDs(t, "slow reader", receive(t, ch, n), want)
}

func testSubscribeConcurrent(t *testing.T, g *gen, s watchdog.EventStore) {
	sub := subscriber(t, s)
	a := g.agg("subconc")
	ch, _ := subscribe(t, sub, a)
	const writers, each = 6, 20
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := s.Append(context.Background(), g.event(a, watchdog.KindResume, 1)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := receive(t, ch, writers*each)
	checkSeqIncreasing(t, "subscription under concurrent writers", got)
	sameIDs(t, "subscription vs Load", got, mustLoad(t, s, a))
}

func testSubscribeRefused(t *testing.T, g *gen, s watchdog.EventStore) {
	sub := subscriber(t, s)
	a := g.agg("subref")
	mustAppend(t, s, g.event(a, watchdog.KindCancel, 1))
	ch, _ := subscribe(t, sub, a)
	loser := g.event(a, watchdog.KindResume, 1)
	if err := s.Append(ctxT(t), loser, g.event(a, watchdog.KindStop, 1)); !errors.Is(err, watchdog.ErrAlreadyDecided) {
		t.Fatalf("err = %v, want ErrAlreadyDecided", err)
	}
	marker := g.event(a, watchdog.KindResume, 2)
	mustAppend(t, s, marker)
	got := receive(t, ch, 1)
	if got[0].ID != marker.ID {
		t.Fatalf("subscription delivered %s from a refused batch; want only %s", got[0].ID, marker.ID)
	}
}

func testSubscribeEnds(t *testing.T, g *gen, s watchdog.EventStore) {
	sub := subscriber(t, s)
	a := g.agg("subend")
	ch, cancel := subscribe(t, sub, a)
	e := g.event(a, watchdog.KindStart, 1)
	mustAppend(t, s, e)
	sameIDs(t, "before cancel", receive(t, ch, 1), []watchdog.Event{e})
	cancel()
	expectClosed(t, ch, "after its context ended")
	// Appends after the end of a subscription still work.
	mustAppend(t, s, g.event(a, watchdog.KindResume, 1))
}
