package watchdog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The fuzz targets of the root package: the parsers and boundaries that
// take bytes or values from outside. CI runs each briefly (scripts/test --all);
// scripts/fuzz runs them longer.

// FuzzPolicyJSON: any bytes either fail to decode with ErrInvalidPolicy or
// decode into a policy that encodes and decodes back to the same bytes; a
// policy that validates is accepted by Start, one that does not is refused
// with ErrInvalidPolicy. Nothing panics.
func FuzzPolicyJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"session_wall_clock_seconds":1.5}`, `{"session_wall_clock_seconds":-1e-10}`,
		`{"agent_idle_activity_evidence_ttl_seconds":1e-10}`, `{"agent_idle_activity_evidence_ttl_seconds":-1}`,
		`{"session_wall_clock_seconds":9223372036.854775807}`, `{"session_wall_clock_seconds":9223372036.854775808}`,
		`{"no_output_deadline_seconds":10,"settle_checks":3,"evidence_channels":["build","build\ufffd"]}`,
		`{"evidence_channels":["a\u0000b"]}`, `{"phase_budgets_seconds":{"plan":"5"}}`, `{"MODE":"shadow"}`,
		`{"rule_modes":{"idle":"shadow"},"liveness_rules":["heartbeat"]}`, `{"session_wall_clock_seconds":1e999999999999999999}`,
	} {
		f.Add([]byte(s))
	}
	w := watchdog.New()
	f.Cleanup(func() { _ = w.Close(context.Background()) })
	n := 0
	f.Fuzz(func(t *testing.T, b []byte) {
		var p watchdog.Policy
		if err := json.Unmarshal(b, &p); err != nil {
			var syntax *json.SyntaxError
			if !errors.Is(err, watchdog.ErrInvalidPolicy) && !errors.As(err, &syntax) {
				t.Fatalf("decode error wraps neither ErrInvalidPolicy nor a syntax error: %v", err)
			}
			return
		}
		enc, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("a decoded policy does not encode: %v", err)
		}
		var q watchdog.Policy
		if err := json.Unmarshal(enc, &q); err != nil {
			t.Fatalf("%s: its own encoding does not decode: %v", enc, err)
		}
		enc2, _ := json.Marshal(q)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not a fixed point:\n%s\n%s", enc, enc2)
		}
		n++
		verr := p.Validate()
		s, err := w.Start(context.Background(), "fuzz-"+strings.Repeat("x", n%3)+time.Duration(n).String(), time.Now(), p)
		switch {
		case verr != nil && !errors.Is(err, watchdog.ErrInvalidPolicy):
			t.Fatalf("Validate says %v but Start says %v", verr, err)
		case verr == nil && err != nil:
			t.Fatalf("a valid policy is refused by Start: %v", err)
		case s != nil:
			_ = s.Stop()
		}
	})
}

// FuzzEventJSON: any bytes either fail to decode or decode into an event
// whose encoding decodes into an event with the same encoding (identity
// after one normalisation), Extra keys included; a key that differs from a
// field only in case never decodes; an event that validates encodes.
func FuzzEventJSON(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e1","aggregate_id":"s","event_kind":"runtime.watchdog.start","window":1,"session_started_at":"2026-05-23T09:00:00Z","window_started_at":"2026-05-23T09:00:00Z","occurred_at":"2026-05-23T09:00:00Z","elapsed_seconds":0,"configured_budget_seconds":60}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"EVENT_ID":"e2"}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"Aggregate_Id":"other"}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"note":{"a":[1,2,"\u0000"]}}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"evidence_summary":[{"channel":"stdout","last_at":"2026-05-23T09:00:00Z","age_seconds":5,"counter":3}],"occurred_at":"2026-05-23T09:00:05Z"}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"phase":"plan"}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"policy":{"session_wall_clock_seconds":1.5}}`,
		`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"ſeq":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e watchdog.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return
		}
		for k := range e.Extra {
			for _, field := range []string{"event_id", "aggregate_id", "event_kind", "window", "seq", "policy"} {
				if strings.EqualFold(k, field) {
					t.Fatalf("decoded with an extra key %q that collides with %q", k, field)
				}
			}
		}
		enc, err := json.Marshal(e)
		if err != nil {
			if e.Validate() == nil {
				t.Fatalf("a valid event does not encode: %v", err)
			}
			return
		}
		var e2 watchdog.Event
		if err := json.Unmarshal(enc, &e2); err != nil {
			t.Fatalf("%s: its own encoding does not decode: %v", enc, err)
		}
		enc2, err := json.Marshal(e2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("not a fixed point (%v):\n%s\n%s", err, enc, enc2)
		}
		if e.ID != e2.ID || e.AggregateID != e2.AggregateID || e.Kind != e2.Kind || e.Window != e2.Window || e.Seq != e2.Seq {
			t.Fatalf("identity changed: %+v -> %+v", e, e2)
		}
	})
}

// FuzzReplay: Replay on any log (events decoded from arbitrary JSON Lines)
// returns mismatches or an error, never panics, and is deterministic.
func FuzzReplay(f *testing.F) {
	_, evs := simulate(f, 3)
	var seed bytes.Buffer
	for _, e := range evs {
		b, _ := json.Marshal(e)
		seed.Write(append(b, '\n'))
	}
	f.Add(seed.Bytes())
	f.Add([]byte(`{"event_id":"d","aggregate_id":"s","event_kind":"runtime.watchdog.decision","window":1,"rule":"idle","mode":"act"}` + "\n" +
		`{"event_id":"c","aggregate_id":"s","event_kind":"runtime.watchdog.cancel","window":1,"decided_by_decision_id":"d"}`))
	f.Add([]byte(`{"event_id":"v","aggregate_id":"s","event_kind":"runtime.watchdog.verdict","window":1,"children_wait_seconds":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var log []watchdog.Event
		for _, line := range bytes.Split(b, []byte("\n")) {
			var e watchdog.Event
			if json.Unmarshal(line, &e) == nil {
				log = append(log, e)
			}
		}
		m1, err1 := watchdog.Replay(log)
		m2, err2 := watchdog.Replay(log)
		if (err1 == nil) != (err2 == nil) || len(m1) != len(m2) {
			t.Fatalf("not deterministic: %v/%d then %v/%d", err1, len(m1), err2, len(m2))
		}
		for _, m := range m1 {
			_ = m.String()
		}
	})
}
