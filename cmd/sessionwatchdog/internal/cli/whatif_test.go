package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	wi "github.com/sessionwatchdog/watchdog/whatif"
)

const stricter = "testdata/stricter-idle.json"

// The text report of the checkpoints log (written by the library with
// WithCheckpoints) under a stricter idle rule, against a golden file.
func TestWhatIfTextGolden(t *testing.T) {
	code, out, errs := run(t, "", "whatif", "--policy", stricter, "--checkpoints", "1s", data+"/checkpoints.jsonl")
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	golden(t, "whatif-checkpoints.txt", out)
}

func TestWhatIfJSONReportsPerWindowAndTotals(t *testing.T) {
	code, out, errs := run(t, "", "whatif", "--json", "--policy", stricter, data+"/checkpoints.jsonl")
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var r wi.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := wi.Totals{Sessions: 3, Windows: 3, Unchanged: 1, Earlier: 2, FalseStops: 1, Changes: 2}
	if r.Totals != want {
		t.Fatalf("totals %+v, want %+v", r.Totals, want)
	}
	if w := r.Windows[0]; w.SessionID != "shadow-idle" || w.Outcome != wi.Earlier || !w.FalseStop || len(w.Candidate) != 1 {
		t.Fatalf("shadow-idle: %+v", w)
	}
}

func TestWhatIfSessionFlagKeepsOneSession(t *testing.T) {
	code, out, _ := run(t, "", "whatif", "--session", "steady", "--policy", stricter, data+"/checkpoints.jsonl")
	if code != ExitOK || strings.Contains(out, "shadow-idle") || !strings.Contains(out, "session steady window 1: UNCHANGED") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestWhatIfBadPolicyIsAUsageErrorNamingTheKnob(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown knob", []string{"--policy", write("u.json", `{"idle_seconds": 5}`)}, `unknown field "idle_seconds"`},
		{"negative value", []string{"--policy", write("n.json", `{"no_output_deadline_seconds": -5}`)}, "no_output_deadline_seconds = -5 must not be negative"},
		{"not JSON", []string{"--policy", write("x.json", `idle: 5`)}, "invalid character"},
		{"missing file", []string{"--policy", filepath.Join(dir, "none.json")}, "no such file"},
		{"no policy", nil, "--policy is required"},
		{"two outputs", []string{"--policy", stricter, "--json", "--html", filepath.Join(dir, "o.html")}, "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, "", append(append([]string{"whatif"}, tc.args...), data+"/checkpoints.jsonl")...)
			if code != ExitUsage || out != "" || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errs, tc.want)
			}
		})
	}
}

func TestWhatIfHelpDescribesTheCommand(t *testing.T) {
	code, out, _ := run(t, "", "help", "whatif")
	if code != ExitOK || !strings.Contains(out, "Usage: sessionwatchdog whatif --policy FILE.json") || !strings.Contains(out, "-checkpoints interval") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	_, top, _ := run(t, "", "help")
	if !strings.Contains(top, "whatif    re-run the log under a candidate policy") {
		t.Fatalf("top-level usage does not list whatif:\n%s", top)
	}
}

// hostileWhatIfLog is the checkpoints log with its first session renamed to an
// id that holds markup and terminal escapes.
func hostileWhatIfLog(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(data + "/checkpoints.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e watchdog.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if e.AggregateID == "shadow-idle" {
			e.AggregateID = "<script>alert(1)</script>\x1b]0;pwned\x07\u202e"
		}
		l, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(l)
		out.WriteByte('\n')
	}
	return out.String()
}

func TestWhatIfEscapesLogStringsInHTMLAndText(t *testing.T) {
	log := hostileWhatIfLog(t)
	page := filepath.Join(t.TempDir(), "whatif.html")
	code, _, errs := run(t, log, "whatif", "--html", page, "--policy", stricter, "-")
	if code != ExitOK || !strings.Contains(errs, "(3 windows)") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	if strings.Contains(html, "<script") || strings.ContainsAny(html, "\x1b\x07\u202e") {
		t.Fatalf("the page carries the log's markup or escapes:\n%s", html)
	}
	if !strings.Contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;\\u001b]0;pwned\\u0007\\u202e") {
		t.Fatalf("the session id is not shown escaped:\n%s", html)
	}
	if !strings.Contains(html, `data-windows="3"`) || !strings.Contains(html, "1 likely false stops") {
		t.Fatalf("page:\n%s", html)
	}
	code, out, _ := run(t, log, "whatif", "--policy", stricter, "-")
	if code != ExitOK || strings.ContainsAny(out, "\x1b\x07\u202e") || !strings.Contains(out, `session <script>alert(1)</script>\u001b]0;pwned\u0007\u202e window 1: EARLIER`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// Without --checkpoints, each window's checkpoint interval is the one its
// Watchdog recorded on its checkpoints (1 s in the fixture), plus a tenth:
// the log decides what --checkpoints 1s decided.
func TestWhatIfWithoutCheckpointsReadsTheIntervalFromTheLog(t *testing.T) {
	report := func(args ...string) wi.Report {
		code, out, errs := run(t, "", append(append([]string{"whatif", "--json", "--policy", stricter}, args...), data+"/checkpoints.jsonl")...)
		if code != ExitOK || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		var r wi.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return r
	}
	logged, given := report(), report("--checkpoints", "1s")
	if logged.Totals != given.Totals {
		t.Fatalf("totals %+v from the log, %+v with --checkpoints 1s", logged.Totals, given.Totals)
	}
	for i, w := range logged.Windows {
		if w.CheckpointEvery != 1100*time.Millisecond || w.Outcome != given.Windows[i].Outcome {
			t.Errorf("%s: interval %v, outcome %s; want 1.1s and %s", w.SessionID, w.CheckpointEvery, w.Outcome, given.Windows[i].Outcome)
		}
	}
	_, text, _ := run(t, "", "whatif", "--policy", stricter, data+"/checkpoints.jsonl")
	if !strings.Contains(text, "checkpoint interval 1.1s, read from the log") {
		t.Fatalf("the text does not say where the interval comes from:\n%s", text)
	}
}
