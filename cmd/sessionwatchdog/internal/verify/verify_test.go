package verify

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
)

func load(t *testing.T, name string) []watchdog.Event {
	t.Helper()
	evs, err := eventlog.ReadFile(filepath.Join("..", "..", "testdata", name), nil)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Every log the library wrote re-derives without a mismatch.
func TestGeneratedLogsVerify(t *testing.T) {
	for _, name := range []string{"sessions.jsonl", "actions.jsonl"} {
		r, err := Run(name, load(t, name), nil, watchdog.Replay)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_ = WriteText(&buf, r)
		if !r.OK() || r.Checked == 0 {
			t.Errorf("%s:\n%s", name, buf.String())
		}
		t.Log(strings.TrimSpace(buf.String()))
	}
}

// A verdict edited after the fact is caught.
func TestATamperedVerdictIsAMismatch(t *testing.T) {
	evs := load(t, "sessions.jsonl")
	var tampered string
	for i, e := range evs {
		if e.Kind == watchdog.KindVerdict && e.ActiveChannel == "mcp_tool" {
			evs[i].ActiveChannel = "subagent" // claims a channel that had no evidence
			tampered = e.ID
			break
		}
	}
	r, err := Run("sessions.jsonl", evs, nil, watchdog.Replay)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mismatches) != 1 || r.Mismatches[0].EventID != tampered {
		t.Fatalf("mismatches %+v, want one for %s", r.Mismatches, tampered)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sessions.jsonl: MISMATCH seq", "event " + tampered, "active=subagent", "active=mcp_tool", "FAIL: 1 mismatches"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestSessionSelection(t *testing.T) {
	var got []watchdog.Event
	spy := func(evs []watchdog.Event) ([]watchdog.Mismatch, error) { got = evs; return nil, nil }
	r, err := Run("x", load(t, "sessions.jsonl"), []string{"waiter-5"}, spy)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sessions != 1 || r.Events != len(got) || len(got) != 3 || r.Checked != 1 {
		t.Errorf("result %+v, replayed %d events", r, len(got))
	}
	for _, e := range got {
		if e.AggregateID != "waiter-5" {
			t.Errorf("replayed an event of %s", e.AggregateID)
		}
	}
}

func TestReplayErrorsNameTheFile(t *testing.T) {
	failing := func([]watchdog.Event) ([]watchdog.Mismatch, error) { return nil, errors.New("boom") }
	_, err := Run("log.jsonl", nil, nil, failing)
	if err == nil || err.Error() != "log.jsonl: replay: boom" {
		t.Fatalf("got %v", err)
	}
}
