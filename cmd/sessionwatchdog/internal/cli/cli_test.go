package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
)

var update = flag.Bool("update", false, "rewrite the golden outputs under testdata/golden")

const data = "../../testdata"

// run runs the command in-process.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(data, "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./internal/cli -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (review, then: go test ./internal/cli -update):\n%s", path, got)
	}
}

func TestInspectGolden(t *testing.T) {
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"sessions.txt", []string{"inspect", data + "/sessions.jsonl"}},
		{"actions.txt", []string{"inspect", data + "/actions.jsonl"}},
		{"agent-42.json", []string{"inspect", "--json", "--session", "agent-42", data + "/sessions.jsonl"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			code, out, errs := run(t, "", tt.args...)
			if code != ExitOK || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			golden(t, tt.golden, out)
		})
	}
}

func TestInspectShowsWhatAPostMortemNeeds(t *testing.T) {
	code, out, _ := run(t, "", "inspect", data+"/sessions.jsonl")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"session agent-42",
		"CONTINUE", "waiting: active_channel mcp_tool",
		"channel ages: stdout 10s, mcp_tool* 0s, subagent never, workspace 4s",
		"stale 1/3", "stale 2/3",
		"DECISION act", "HARD_STOP by rule idle: idle_exceeded",
		"decided by wd1-15",
		"deadline handler", `handler "tool:web_search" overran`, `dying span "fetch results page"`,
		"wait_timeout", "generation 1",
		"DECISION shadow", "shadow: advice only",
		"resume", "window 2 started",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestInspectFiltersAndStdin(t *testing.T) {
	log, err := os.ReadFile(data + "/sessions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// Flags may follow the file; "-" reads stdin; kinds are repeatable and comma-separated.
	code, out, errs := run(t, string(log), "inspect", "-", "--kind", "cancel,stop", "--kind=resume", "--since", "2026-05-23T09:00:20Z")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"session agent-42", "session pipeline-7", "session shadow-3", "cancel", "resume", "stop"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"start ", "DECISION", "stale"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("output has %q, filtered out:\n%s", unwanted, out)
		}
	}
	code, out, _ = run(t, "", "inspect", "--session", "nope", data+"/sessions.jsonl")
	if code != ExitOK || out != "no events match\n" {
		t.Errorf("no match: exit %d, %q", code, out)
	}
	code, out, _ = run(t, "", "inspect", "--json", "--until", "2026-05-23T09:00:00Z", "--", data+"/sessions.jsonl")
	var r struct {
		Sessions []struct {
			Timeline []json.RawMessage `json:"timeline"`
		} `json:"sessions"`
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &r) != nil || len(r.Sessions) != 4 || len(r.Sessions[0].Timeline) != 1 {
		t.Errorf("--until: exit %d, %s", code, out)
	}
}

func TestExitCodesAndErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	for _, tt := range []struct {
		name    string
		args    []string
		code    int
		stdout  string // a substring, if non-empty
		stderr  string // a substring, if non-empty
		noOther bool   // stdout must be empty
	}{
		{"no command", nil, ExitUsage, "", "Usage:", true},
		{"help", []string{"help"}, ExitOK, "Exit codes:", "", false},
		{"version", []string{"version"}, ExitOK, "library (devel", "", false},
		{"--help", []string{"--help"}, ExitOK, "Examples:", "", false},
		{"help inspect", []string{"help", "inspect"}, ExitOK, "-session", "", false},
		{"inspect --help", []string{"inspect", "--help"}, ExitOK, "sessionwatchdog inspect --html report.html", "", false},
		{"inspect -h", []string{"inspect", "-h"}, ExitOK, "RFC 3339", "", false},
		{"help of nothing", []string{"help", "nope"}, ExitUsage, "", `unknown command "nope"`, true},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "", `unknown command "frobnicate"`, true},
		{"unknown flag", []string{"inspect", "--frob", data + "/sessions.jsonl"}, ExitUsage, "", "flag provided but not defined: -frob", true},
		{"no file", []string{"inspect"}, ExitUsage, "", "want exactly one event log", true},
		{"two files", []string{"inspect", "a", "b"}, ExitUsage, "", "got 2 arguments", true},
		{"missing file", []string{"inspect", missing}, ExitUsage, "", missing + ": no such file or directory", true},
		{"corrupt file", []string{"inspect", data + "/corrupt.jsonl"}, ExitUsage, "", data + "/corrupt.jsonl:3: invalid event JSON", true},
		{"bad --since", []string{"inspect", "--since", "yesterday", data + "/sessions.jsonl"}, ExitUsage, "", `invalid value "yesterday" for flag -since: want an RFC 3339 time`, true},
		{"until before since", []string{"inspect", "--since", "2026-05-23T10:00:00Z", "--until", "2026-05-23T09:00:00Z", data + "/sessions.jsonl"}, ExitUsage, "", "is before --since", true},
		{"json and html", []string{"inspect", "--json", "--html", "x.html", data + "/sessions.jsonl"}, ExitUsage, "", "exclusive", true},
		{"unwritable html", []string{"inspect", "--html", filepath.Join(missing, "x.html"), data + "/sessions.jsonl"}, ExitUsage, "", "x.html", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, "", tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if tt.stdout != "" && !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, out)
			}
			if tt.stderr != "" && !strings.Contains(errs, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, errs)
			}
			if tt.noOther && out != "" {
				t.Errorf("stdout should be empty on error, got %q", out)
			}
		})
	}
}

func TestCorruptStdinNamesIt(t *testing.T) {
	code, _, errs := run(t, `{"event_id":"a","aggregate_id":"s","event_kind":"k","window":1}`+"\nnot json\n", "inspect", "-")
	if code != ExitUsage || !strings.Contains(errs, "<stdin>:2: not a JSON object") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

func TestInspectHTMLWritesAFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.html")
	code, stdout, errs := run(t, "", "inspect", "--html", out, data+"/sessions.jsonl")
	if code != ExitOK || stdout != "" || !strings.Contains(errs, "wrote "+out+" (4 sessions)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) || !bytes.Contains(b, []byte(`data-session="agent-42"`)) {
		t.Errorf("not the page: %.200s", b)
	}
}

func TestVerify(t *testing.T) {
	log, err := os.ReadFile(data + "/sessions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "", "verify", data+"/sessions.jsonl")
	if code != ExitOK || errs != "" || !strings.Contains(out, "sessions.jsonl: ok (4 sessions, 20 events, 12 verdicts and outcomes checked)") {
		t.Errorf("clean log: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = run(t, "", "verify", data+"/actions.jsonl")
	if code != ExitOK {
		t.Errorf("actions log: exit %d: %s", code, out)
	}

	// A verdict edited after the fact: the CONTINUE claims workspace kept
	// the session alive, but the evidence it recorded says mcp_tool did.
	tampered := strings.Replace(string(log), `"active_channel":"mcp_tool"`, `"active_channel":"workspace"`, 1)
	code, out, _ = run(t, tampered, "verify", "-")
	if code != ExitMismatch {
		t.Fatalf("tampered log: exit %d, want %d:\n%s", code, ExitMismatch, out)
	}
	for _, want := range []string{"<stdin>: MISMATCH seq 8 event wd1-8", "recorded CONTINUE rule=idle active=workspace", "re-derived CONTINUE rule=idle active=mcp_tool", "FAIL: 1 mismatches"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	// A decision whose outcome links nothing.
	orphan := strings.Replace(string(log), `"decided_by_decision_id":"wd1-15"`, `"decided_by_decision_id":"wd1-999"`, 1)
	code, out, _ = run(t, orphan, "verify", "--json", "-")
	var res struct {
		Mismatches []struct {
			EventID string `json:"event_id"`
			Derived string `json:"derived"`
		} `json:"mismatches"`
	}
	if code != ExitMismatch || json.Unmarshal([]byte(out), &res) != nil || len(res.Mismatches) != 1 || res.Mismatches[0].Derived != "no such decision earlier in the log" {
		t.Errorf("orphan outcome: exit %d:\n%s", code, out)
	}

	// Only whole sessions can be selected.
	code, out, _ = run(t, tampered, "verify", "--session", "pipeline-7,shadow-3", "-")
	if code != ExitOK || !strings.Contains(out, "ok (2 sessions") {
		t.Errorf("--session: exit %d:\n%s", code, out)
	}

	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"verify", data + "/corrupt.jsonl"}, ExitUsage, data + "/corrupt.jsonl:3: invalid event JSON"},
		{[]string{"verify"}, ExitUsage, "want exactly one event log"},
		{[]string{"verify", "--kind", "x", data + "/sessions.jsonl"}, ExitUsage, "flag provided but not defined: -kind"},
	} {
		if code, _, errs := run(t, "", tt.args...); code != tt.code || !strings.Contains(errs, tt.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d with %q", tt.args, code, errs, tt.code, tt.stderr)
		}
	}
	for _, args := range [][]string{{"verify", "--help"}, {"help", "verify"}} {
		if code, out, _ := run(t, "", args...); code != ExitOK || !strings.Contains(out, "at least one mismatch") {
			t.Errorf("%q: exit %d:\n%s", args, code, out)
		}
	}
}

// hostileLog is a valid event log whose ids, kinds, channel names and
// reasons carry what a terminal acts on: an OSC title change, a screen
// clear, colours (7- and 8-bit CSI), a bidi override, and a newline that
// would fake a session heading.
const hostileLog = `{"event_id":"e1\u001b[2J","aggregate_id":"s\u001b]0;pwned\u0007\nsession fake","event_kind":"runtime.watchdog.start","window":1,"session_started_at":"2026-05-23T09:00:00Z","window_started_at":"2026-05-23T09:00:00Z","occurred_at":"2026-05-23T09:00:00Z","configured_budget_seconds":60}
{"event_id":"e2","aggregate_id":"s\u001b]0;pwned\u0007\nsession fake","event_kind":"runtime.watchdog.\u009b31m\u202eevil","window":1,"reason":"\u001b[31mred\t\u2028","occurred_at":"2026-05-23T09:00:01Z","evidence_summary":[{"channel":"std\u001b[5mout","last_at":"2026-05-23T09:00:00Z","age_seconds":1}]}
`

// termClean fails t when out holds a control character other than newline
// and tab, a bidi control, or invalid UTF-8.
func termClean(t *testing.T, what, out string) {
	t.Helper()
	if fields := strings.NewReplacer("\n", "", "\t", "").Replace(out); termsafe.String(fields) != fields {
		t.Errorf("%s reaches the terminal raw:\n%q", what, out)
	}
}

// No byte of a hostile log reaches the terminal as a control sequence, in
// any output of inspect or verify, and no field fakes a line.
func TestHostileLogReachesTheTerminalEscaped(t *testing.T) {
	for _, args := range [][]string{{"inspect", "-"}, {"inspect", "--json", "-"}, {"verify", "-"}, {"verify", "--json", "-"}} {
		code, out, errs := run(t, hostileLog, args...)
		if code == ExitUsage {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		termClean(t, strings.Join(args, " ")+" stdout", out)
		termClean(t, strings.Join(args, " ")+" stderr", errs)
		if args[0] == "inspect" && !strings.Contains(out, `\u001b]0;pwned\u0007`) {
			t.Errorf("%v: the escaped session id is not shown:\n%s", args, out)
		}
	}
	_, out, _ := run(t, hostileLog, "inspect", "-")
	if n := strings.Count("\n"+out, "\nsession "); n != 1 {
		t.Errorf("%d session headings for 1 session:\n%s", n, out)
	}
	_, out, _ = run(t, hostileLog, "inspect", "--json", "-")
	var doc struct {
		Sessions []struct {
			ID string `json:"session_id"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Sessions) != 1 || doc.Sessions[0].ID != "s\x1b]0;pwned\x07\nsession fake" {
		t.Errorf("the escaped JSON does not decode to the recorded id: %v %+v", err, doc)
	}
}

// An error that quotes the log's bytes (a line that is not JSON) quotes
// them escaped.
func TestErrorsQuotingALogReachTheTerminalEscaped(t *testing.T) {
	for _, cmd := range []string{"inspect", "verify"} {
		code, out, errs := run(t, "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e not json\n", cmd, "-")
		if code != ExitUsage {
			t.Errorf("%s: exit %d, want %d", cmd, code, ExitUsage)
		}
		termClean(t, cmd+" stdout", out)
		termClean(t, cmd+" stderr", errs)
		if !strings.Contains(errs, `not a JSON object: "\x1b]0;pwned`) {
			t.Errorf("%s: the error does not show the escaped line: %q", cmd, errs)
		}
	}
}
