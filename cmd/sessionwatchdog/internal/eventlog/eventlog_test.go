package eventlog

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const fixtures = "../../testdata"

func TestReadsEveryEventOfAGeneratedLog(t *testing.T) {
	evs, err := ReadFile(filepath.Join(fixtures, "sessions.jsonl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 20 {
		t.Fatalf("got %d events, want 20", len(evs))
	}
	if evs[0].AggregateID != "pipeline-7" || evs[0].Kind != "runtime.watchdog.start" {
		t.Errorf("first event: %+v", evs[0])
	}
	var found bool
	for _, e := range evs {
		if e.Kind == "runtime.handler.deadline_exceeded" {
			found = true
			if e.DyingSpan != "fetch results page" {
				t.Errorf("dying_span lost: %+v", e)
			}
		}
	}
	if !found {
		t.Error("the handler overrun event is missing")
	}
}

// Fields this version does not know are kept, in Event.Extra.
func TestUnknownFieldsAreKept(t *testing.T) {
	in := `{"event_id":"a","aggregate_id":"s","event_kind":"runtime.future","window":1,"quota":{"tokens":5}}` + "\n"
	evs, err := Read(strings.NewReader(in), "x")
	if err != nil || len(evs) != 1 || string(evs[0].Extra["quota"]) != `{"tokens":5}` {
		t.Fatalf("got %+v, %v", evs, err)
	}
}

func TestStdin(t *testing.T) {
	in := `{"event_id":"a","aggregate_id":"s","event_kind":"k","window":1}` + "\n"
	evs, err := ReadFile("-", strings.NewReader(in))
	if err != nil || len(evs) != 1 {
		t.Fatalf("got %v, %v", evs, err)
	}
}

func TestMissingFileNamesIt(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope.jsonl"), nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Fatalf("got %v", err)
	}
}

func TestCorruptLineIsAnErrorNamingFileAndLine(t *testing.T) {
	path := filepath.Join(fixtures, "corrupt.jsonl")
	_, err := ReadFile(path, nil)
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *LineError", err)
	}
	if le.File != path || le.Line != 3 {
		t.Errorf("got %s:%d, want %s:3", le.File, le.Line, path)
	}
	if !strings.HasPrefix(err.Error(), path+":3: invalid event JSON") {
		t.Errorf("message: %v", err)
	}
}

func TestBadLines(t *testing.T) {
	ok := `{"event_id":"a","aggregate_id":"s","event_kind":"k","window":1}`
	for _, tt := range []struct {
		name, in string
		line     int
		want     string
	}{
		{"blank line", ok + "\n\n", 2, "empty line"},
		{"array", "[1,2]\n", 1, "not a JSON object"},
		{"text", "hello\n", 1, `not a JSON object: "hello"`},
		{"no id", `{"aggregate_id":"s","event_kind":"k","window":1}` + "\n", 1, "empty event_id"},
		{"no session", `{"event_id":"a","event_kind":"k","window":1}` + "\n", 1, "empty aggregate_id"},
		{"no kind", `{"event_id":"a","aggregate_id":"s","window":1}` + "\n", 1, "empty event_kind"},
		{"window 0", `{"event_id":"a","aggregate_id":"s","event_kind":"k"}` + "\n", 1, "window 0, want >= 1"},
		{"bad time", `{"event_id":"a","aggregate_id":"s","event_kind":"k","window":1,"occurred_at":"yesterday"}` + "\n", 1, "invalid event JSON"},
		{"bad type", `{"event_id":"a","aggregate_id":"s","event_kind":"k","window":"one"}` + "\n", 1, "invalid event JSON"},
		{"duplicate id", ok + "\n" + ok + "\n", 2, `event_id "a" appears twice (first on line 1)`},
		{"torn last line", ok + "\n" + ok[:20], 2, "incomplete last line"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.in), "log.jsonl")
			var le *LineError
			if !errors.As(err, &le) || le.Line != tt.line || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want line %d with %q", err, tt.line, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "log.jsonl:") {
				t.Errorf("the error does not name the file: %v", err)
			}
		})
	}
}

func TestTolerated(t *testing.T) {
	ok := `{"event_id":"%s","aggregate_id":"s","event_kind":"k","window":1}`
	line := func(id string) string { return strings.Replace(ok, "%s", id, 1) }
	for name, in := range map[string]string{
		"empty input":               "",
		"CRLF line ends":            line("a") + "\r\n" + line("b") + "\r\n",
		"complete last line, no NL": line("a") + "\n" + line("b"),
		"surrounding spaces":        "  " + line("a") + "  \n",
	} {
		if _, err := Read(strings.NewReader(in), "x"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestOverlongLine(t *testing.T) {
	in := `{"event_id":"` + strings.Repeat("x", MaxLineBytes) + `"}` + "\n"
	_, err := Read(strings.NewReader(in), "big.jsonl")
	if err == nil || !strings.Contains(err.Error(), "big.jsonl:1: line longer than") {
		t.Fatalf("got %v", err)
	}
}

// Read never panics, whatever the input.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"event_id":"a","aggregate_id":"s","event_kind":"k","window":1}` + "\n"))
	f.Add([]byte(`{"event_id":"a","evidence_summary":[{"channel":"stdout","last_at":null}],"window":2}`))
	f.Add([]byte("\n\n{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := Read(strings.NewReader(string(b)), "fuzz")
		if err == nil {
			for _, e := range evs {
				if e.ID == "" || e.AggregateID == "" || e.Kind == "" || e.Window < 1 {
					t.Fatalf("invalid event accepted: %+v", e)
				}
			}
		}
	})
}
