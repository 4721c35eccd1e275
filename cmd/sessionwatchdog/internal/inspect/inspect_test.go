package inspect

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
)

func load(t testing.TB, name string) []watchdog.Event {
	t.Helper()
	evs, err := eventlog.ReadFile(filepath.Join("..", "..", "testdata", name), nil)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func labels(s Session) []string {
	out := make([]string, len(s.Timeline))
	for i, en := range s.Timeline {
		out[i] = en.Label
	}
	return out
}

func session(t *testing.T, r Report, id string) Session {
	t.Helper()
	for _, s := range r.Sessions {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no session %q in %d sessions", id, len(r.Sessions))
	return Session{}
}

func TestTimelinesOfAGeneratedLog(t *testing.T) {
	r := Build(load(t, "sessions.jsonl"), Filter{})
	if got := len(r.Sessions); got != 4 {
		t.Fatalf("%d sessions, want 4", got)
	}
	for id, want := range map[string][]string{
		"pipeline-7": {"start", "DECISION act", "cancel", "resume", "stop"},
		"agent-42":   {"start", "CONTINUE", "deadline handler", "CONTINUE", "CONTINUE", "stale 1/3", "stale 2/3", "DECISION act", "cancel"},
		"shadow-3":   {"start", "DECISION shadow", "stop"},
		"waiter-5":   {"start", "wait_timeout", "stop"},
	} {
		if got := labels(session(t, r, id)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: labels %q, want %q", id, got, want)
		}
	}
	agent := session(t, r, "agent-42")
	if want := []string{"stdout", "mcp_tool", "subagent", "workspace"}; !reflect.DeepEqual(agent.Channels, want) {
		t.Errorf("channels %q, want %q", agent.Channels, want)
	}
	cont := agent.Timeline[1]
	if !strings.Contains(cont.Summary, "active_channel mcp_tool") {
		t.Errorf("CONTINUE does not name its channel: %s", cont.Summary)
	}
	if len(cont.Ages) != 4 || cont.Ages[3].Channel != "workspace" || *cont.Ages[3].AgeSeconds < 3.9 {
		t.Errorf("ages at the CONTINUE: %+v", cont.Ages)
	}
	if cont.Ages[2].AgeSeconds != nil {
		t.Errorf("subagent recorded nothing, got age %v", *cont.Ages[2].AgeSeconds)
	}
	overrun := agent.Timeline[2]
	for _, want := range []string{"reason handler_deadline_exceeded", `dying span "fetch results page"`, `handler "tool:web_search" overran: elapsed 3s of budget 3s`} {
		if !strings.Contains(overrun.Summary, want) {
			t.Errorf("overrun summary %q lacks %q", overrun.Summary, want)
		}
	}
	dec, cancel := agent.Timeline[7], agent.Timeline[8]
	if !strings.Contains(cancel.Summary, "decided by "+dec.Event.ID) {
		t.Errorf("cancel does not link its decision %s: %s", dec.Event.ID, cancel.Summary)
	}
	if !strings.Contains(agent.Final, "idle_exceeded") || !strings.Contains(session(t, r, "pipeline-7").Final, "window 2: completed") {
		t.Errorf("finals: %q, %q", agent.Final, session(t, r, "pipeline-7").Final)
	}
	if !strings.Contains(session(t, r, "shadow-3").Timeline[1].Summary, "shadow: advice only") {
		t.Error("the shadow decision does not say it did nothing")
	}
}

// A kind this version does not know is shown with every field it carries,
// known to Event or not; it never makes the inspector fail.
func TestUnknownKindsShowEveryField(t *testing.T) {
	e := watchdog.Event{ID: "x1", AggregateID: "s", Kind: "runtime.watchdog.quota_exhausted", Window: 2,
		Reason: "tokens", Handler: "model:call", MeasureSeconds: 1.5, OccurredAt: time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC),
		Extra: map[string]json.RawMessage{"tokens_used": json.RawMessage(`120000`), "limits": json.RawMessage(`{"tokens":100000}`)}}
	r := Build([]watchdog.Event{e}, Filter{Kinds: []string{"quota_exhausted"}})
	if len(r.Sessions) != 1 {
		t.Fatal("the unknown kind was dropped")
	}
	en := r.Sessions[0].Timeline[0]
	if en.Known || en.Label != "watchdog.quota_exhausted" {
		t.Errorf("known %v, label %q", en.Known, en.Label)
	}
	want := `reason tokens; handler="model:call"; limits={"tokens":100000}; measure_seconds=1.5; tokens_used=120000`
	if en.Summary != want {
		t.Errorf("summary\n got %s\nwant %s", en.Summary, want)
	}
}

func TestRecoveryAndLayerKinds(t *testing.T) {
	for _, tt := range []struct {
		e            watchdog.Event
		label, words string
	}{
		{watchdog.Event{Kind: watchdog.KindHandlerAbandoned, Layer: "handler", Handler: "tool:x", DyingSpan: "parse", MeasureSeconds: 8, LimitSeconds: 8},
			"abandoned handler", `handler "tool:x" ignored its deadline past the grace: abandoned after 8s (budget+grace 8s); dying span "parse"`},
		{watchdog.Event{Kind: watchdog.KindAttemptCancelled, Handler: "plan", Layer: "phase", Attempt: 1, Reason: "idle_exceeded"},
			"attempt cancelled", `phase "plan" attempt 1 ended by idle_exceeded`},
		{watchdog.Event{Kind: watchdog.KindRetry, Handler: "plan", Layer: "phase", Attempt: 2, LimitSeconds: 0.5, Reason: "idle_exceeded"},
			"retry", `phase "plan": attempt 2 after backoff 500ms (idle_exceeded)`},
		{watchdog.Event{Kind: watchdog.KindRecoveryBudgetExceeded, Handler: "plan", Layer: "phase", Attempt: 3, Reason: "idle_exceeded"},
			"recovery budget exceeded", `phase "plan": retries ran out at attempt 3 (idle_exceeded)`},
		{watchdog.Event{Kind: watchdog.KindCallCompleted, Layer: "handler", Handler: "Bash", MeasureSeconds: 1.2, LimitSeconds: 600, Reason: "ok"},
			"call done", `handler "Bash" ran 1.2s of cap 10m0s: ok`},
		{watchdog.Event{Kind: watchdog.KindCallCompleted, Layer: "handler", Handler: "Bash", MeasureSeconds: 1.2, LimitSeconds: 600, Reason: "error", Error: "the agent reported the call failed (is_error)"},
			"call failed", `handler "Bash" ran 1.2s of cap 10m0s: error (the agent reported the call failed (is_error))`},
		{watchdog.Event{Kind: watchdog.KindVerdict, Rule: "idle", ActiveChannel: "none", HandlersInFlight: 2},
			"CONTINUE", "handlers in flight 2"},
	} {
		tt.e.ID, tt.e.AggregateID, tt.e.Window = "e", "s", 1
		en := Build([]watchdog.Event{tt.e}, Filter{}).Sessions[0].Timeline[0]
		if en.Label != tt.label || !strings.Contains(en.Summary, tt.words) || !en.Known {
			t.Errorf("%s: label %q, summary %q; want %q containing %q", tt.e.Kind, en.Label, en.Summary, tt.label, tt.words)
		}
	}
}

func TestOutcomesOfCustomActions(t *testing.T) {
	r := Build(load(t, "actions.jsonl"), Filter{})
	flaky := session(t, r, "flaky-action")
	if want := []string{"start", "DECISION act", "action_failed", "DECISION act", "cancel"}; !reflect.DeepEqual(labels(flaky), want) {
		t.Errorf("flaky-action: %q", labels(flaky))
	}
	if s := flaky.Timeline[2].Summary; !strings.Contains(s, "kill agent: permission denied") || !strings.Contains(s, flaky.Timeline[1].Event.ID) {
		t.Errorf("action_failed summary: %s", s)
	}
	racer := session(t, r, "racer")
	if want := []string{"start", "wait_timeout", "DECISION act", "superseded", "stop"}; !reflect.DeepEqual(labels(racer), want) {
		t.Errorf("racer: %q", labels(racer))
	}
	if s := racer.Timeline[3].Summary; !strings.Contains(s, racer.Timeline[2].Event.ID) {
		t.Errorf("superseded summary does not link the decision: %s", s)
	}
}

func TestFilter(t *testing.T) {
	evs := load(t, "sessions.jsonl")
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	count := func(f Filter) (sessions, events int) {
		r := Build(evs, f)
		for _, s := range r.Sessions {
			events += len(s.Timeline)
		}
		return len(r.Sessions), events
	}
	for _, tt := range []struct {
		name             string
		f                Filter
		sessions, events int
	}{
		{"all", Filter{}, 4, 20},
		{"one session", Filter{Sessions: []string{"agent-42"}}, 1, 9},
		{"two sessions", Filter{Sessions: []string{"agent-42", "shadow-3"}}, 2, 12},
		{"unknown session", Filter{Sessions: []string{"nope"}}, 0, 0},
		{"short kind", Filter{Kinds: []string{"cancel"}}, 2, 2},
		{"full kind", Filter{Kinds: []string{watchdog.KindDecision}}, 3, 3},
		{"new kind by its last part", Filter{Kinds: []string{"deadline_exceeded"}}, 1, 1},
		{"kind and session", Filter{Kinds: []string{"verdict", "decision"}, Sessions: []string{"agent-42"}}, 1, 6},
		{"a part of a kind is no kind", Filter{Kinds: []string{"cel"}}, 0, 0},
		{"since", Filter{Since: at("2026-05-23T09:00:21Z")}, 4, 8},
		{"until is inclusive", Filter{Until: at("2026-05-23T09:00:00Z")}, 4, 4},
		{"range", Filter{Since: at("2026-05-23T09:00:11Z"), Until: at("2026-05-23T09:00:20Z")}, 1, 3},
		{"wider range", Filter{Since: at("2026-05-23T09:00:11Z"), Until: at("2026-05-23T09:00:20.5Z")}, 2, 5},
	} {
		if s, e := count(tt.f); s != tt.sessions || e != tt.events {
			t.Errorf("%s: %d sessions, %d events; want %d, %d", tt.name, s, e, tt.sessions, tt.events)
		}
	}
}

func TestJSONCarriesTheWholeEvent(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Build(load(t, "sessions.jsonl"), Filter{Sessions: []string{"agent-42"}})); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Sessions []struct {
			ID       string `json:"session_id"`
			Timeline []struct {
				Label string          `json:"label"`
				Known bool            `json:"known_kind"`
				Event json.RawMessage `json:"event"`
			} `json:"timeline"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Sessions) != 1 || out.Sessions[0].ID != "agent-42" || len(out.Sessions[0].Timeline) != 9 {
		t.Fatalf("got %d sessions, want agent-42 with 9 events", len(out.Sessions))
	}
	var e watchdog.Event
	if err := json.Unmarshal(out.Sessions[0].Timeline[2].Event, &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != watchdog.KindHandlerDeadline || e.Handler != "tool:web_search" || e.DyingSpan != "fetch results page" {
		t.Errorf("the overrun event lost fields: %+v", e)
	}
	buf.Reset()
	if err := WriteJSON(&buf, Report{}); err != nil || strings.TrimSpace(buf.String()) != `{
  "sessions": []
}` {
		t.Errorf("empty report: %q, %v", buf.String(), err)
	}
}

func TestHTMLIsSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Build(load(t, "sessions.jsonl"), Filter{}), "sessions.jsonl"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"<link", "src=", "href=", "@import", "url(", "https://", "<iframe", "fetch(", "XMLHttpRequest"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page references something outside itself: %q", bad)
		}
	}
	// The only URL is the SVG namespace, an identifier that is never fetched.
	if n := strings.Count(page, "http://"); n != strings.Count(page, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Errorf("%d http:// URLs besides the SVG namespace", n)
	}
	for _, want := range []string{`data-session="agent-42"`, `data-session="pipeline-7"`, `data-session="shadow-3"`,
		"stale 1/3", "CONTINUE", "DECISION shadow", "deadline handler", "wait_timeout", `class="idle"`, `class="overdue"`, `class="budget"`, `class="mark"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestHTMLEscapesWhatTheLogSays(t *testing.T) {
	evil := `<script>alert("x")</script>`
	e := watchdog.Event{ID: "1", AggregateID: evil, Kind: "runtime.evil</title>", Window: 1, Reason: evil,
		OccurredAt: time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC),
		Extra:      map[string]json.RawMessage{"x": json.RawMessage(`"</script><script>alert(1)</script>"`)}}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Build([]watchdog.Event{e}, Filter{}), evil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "<script>alert") || strings.Contains(buf.String(), "</title>\"") {
		t.Error("log content reached the page unescaped")
	}
	if strings.Count(buf.String(), "<script>") != 1 {
		t.Error("want exactly the page's own script")
	}
}

func TestNiceStep(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		0:                      time.Millisecond,
		50 * time.Second:       5 * time.Second,
		52 * time.Second:       10 * time.Second,
		3 * time.Hour:          30 * time.Minute,
		400 * 24 * time.Hour:   40 * 24 * time.Hour,
		time.Duration(1 << 62): 128112 * time.Hour,
	} {
		if got := niceStep(d); got != want || d/got > 10 {
			t.Errorf("niceStep(%v) = %v, want %v", d, got, want)
		}
	}
}

// Whatever a log holds, every renderer finishes without a panic.
func FuzzRender(f *testing.F) {
	for _, name := range []string{"sessions.jsonl", "actions.jsonl"} {
		b, err := json.Marshal(load(f, name)[:6])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`[{"event_id":"a\u001b[2J","aggregate_id":"s\u001b]0;pwned\u0007\nsession fake","event_kind":"runtime.watchdog.\u009b31m\u202e","window":1,"reason":"\t\u2028","occurred_at":"2026-05-23T09:00:00Z","evidence_summary":[{"channel":"std\u001bout","last_at":"2026-05-23T09:00:00Z"}]}]`))
	f.Add([]byte(`[{"event_id":"a","aggregate_id":"s","event_kind":"runtime.watchdog.verdict","window":1,"rule":"idle","limit_seconds":1e300,"measure_seconds":-1e300,"configured_budget_seconds":1e308,"occurred_at":"0001-01-01T00:00:00Z","evidence_summary":[{"channel":"stdout","last_at":"9999-12-31T23:59:59Z","age_seconds":1e308}]}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var evs []watchdog.Event
		if json.Unmarshal(b, &evs) != nil {
			return
		}
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 10*time.Second { // a guard against runaway loops, far above the real cost
				t.Fatalf("rendering took %v", d)
			}
		}()
		r := Build(evs, Filter{})
		var buf bytes.Buffer
		if err := WriteText(&buf, r); err != nil {
			t.Fatal(err)
		}
		// The text holds no control character but its own newlines and
		// tabs, and no field fakes a session heading.
		text := buf.String()
		if fields := strings.NewReplacer("\n", "", "\t", "").Replace(text); termsafe.String(fields) != fields {
			t.Fatalf("the text output holds control characters or invalid UTF-8: %q", text)
		}
		if n := strings.Count("\n"+text, "\nsession "); n != len(r.Sessions) {
			t.Fatalf("%d session headings for %d sessions:\n%s", n, len(r.Sessions), text)
		}
		if err := WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
		if err := WriteHTML(&buf, r, "fuzz"); err != nil {
			t.Fatal(err)
		}
	})
}

// The session ceiling is drawn from the policy recorded on the start event,
// or from a verdict of the session_ceiling rule.
func TestHTMLDrawsTheSessionCeiling(t *testing.T) {
	t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	p := watchdog.Policy{WallClock: time.Minute, SessionCeiling: 90 * time.Second}
	evs := []watchdog.Event{
		{ID: "1", AggregateID: "s", Kind: watchdog.KindStart, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0, ConfiguredBudgetSeconds: 60, Policy: &p},
		{ID: "2", AggregateID: "s", Kind: watchdog.KindStop, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(100 * time.Second)},
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Build(evs, Filter{}), "x"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `class="ceiling"`); n != 1 {
		t.Errorf("%d ceiling lines, want 1", n)
	}
	if !strings.Contains(buf.String(), "session ceiling 1m30s (policy) at 2026-05-23T09:01:30.000Z") {
		t.Error("the ceiling line does not say where it comes from")
	}
}

// A session whose events carry no session_started_at (a log written by
// other tooling) is shown with "start unknown" and offsets from its first
// event, not from year 1 (which printed offsets of +-2562047h); a start
// that only a later event carries is taken from it.
func TestASessionWithoutAStartTimeIsShownFromItsFirstEvent(t *testing.T) {
	at := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	ev := func(id string, off time.Duration, start time.Time) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: "s", Kind: watchdog.KindVerdict, Window: 1, OccurredAt: at.Add(off), SessionStartedAt: start}
	}
	for name, tc := range map[string]struct {
		evs          []watchdog.Event
		header, offs []string
		html         string
	}{
		"no start anywhere": {
			[]watchdog.Event{ev("a", 0, time.Time{}), ev("b", 1500*time.Millisecond, time.Time{})},
			[]string{"start unknown (offsets from the first event)"}, []string{"+0s", "+1.5s"}, "unknown",
		},
		"start on a later event": {
			[]watchdog.Event{ev("a", 0, time.Time{}), ev("b", 1500*time.Millisecond, at.Add(-time.Second))},
			[]string{"started 2026-05-23T08:59:59.000Z"}, []string{"+1s", "+2.5s"}, "2026-05-23T08:59:59.000Z",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := Build(tc.evs, Filter{})
			var buf bytes.Buffer
			if err := WriteText(&buf, r); err != nil {
				t.Fatal(err)
			}
			text := buf.String()
			for _, want := range append(tc.header, tc.offs...) {
				if !strings.Contains(text, want) {
					t.Errorf("the text lacks %q:\n%s", want, text)
				}
			}
			for _, bad := range []string{"2562047h", "0001-01-01"} {
				if strings.Contains(text, bad) {
					t.Errorf("the text shows %q:\n%s", bad, text)
				}
			}
			buf.Reset()
			if err := WriteHTML(&buf, r, "t"); err != nil {
				t.Fatal(err)
			}
			if html := buf.String(); strings.Contains(html, "0001-01-01") || !strings.Contains(html, tc.html) {
				t.Errorf("the HTML shows year 1 or lacks %q", tc.html)
			}
		})
	}
}

// Checkpoints and completed tool calls have markers of their own, named in
// the legend, instead of the "other kind" marker.
func TestHTMLLegendNamesCheckpointsAndCompletedCalls(t *testing.T) {
	t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	ev := func(id, kind string, at time.Duration) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: "s", Kind: kind, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(at)}
	}
	call := ev("3", watchdog.KindCallCompleted, 3*time.Second)
	call.Handler, call.Layer, call.Reason, call.MeasureSeconds, call.LimitSeconds = "search", "handler", "ok", 2, 60
	evs := []watchdog.Event{ev("1", watchdog.KindStart, 0), ev("2", watchdog.KindCheckpoint, time.Second), call, ev("4", watchdog.KindStop, 5*time.Second)}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Build(evs, Filter{}), "x"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"k-checkpoint", "k-call", `</i>checkpoint</span>`, `</i>tool call completed</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `class="marker k-other`) {
		t.Error("a checkpoint or a completed call is drawn as another kind")
	}
}
