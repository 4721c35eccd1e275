//go:build unix

package run_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/transcript"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// A worker that prints nothing for longer than the idle window while it
// edits files and commits them with git, then makes commits only (git
// work alone), survives: the workspace's evidence defers the idle rule
// (CONTINUE with active_channel workspace), and the wrapper exits 0.
func TestQuietWorkerWithFileAndGitWorkSurvives(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	sh := script(t, dir, "quiet.sh", `set -e
cd "$1"
git init -q .
git config user.email worker@example.com
git config user.name worker
echo "starting"
i=0
while [ $i -lt 6 ]; do
	echo "edit $i" >> notes.txt
	git add notes.txt
	git commit -q -m "edit $i"
	sleep 0.2
	i=$((i+1))
done
while [ $i -lt 12 ]; do
	git commit -q --allow-empty -m "empty $i"
	sleep 0.2
	i=$((i+1))
done
echo "done"
`)
	log := filepath.Join(dir, "events.jsonl")
	r := runWrapper(t, dir, "--log", log, "--wall", "30s", "--idle", "600ms", "--ttl", "1s", "--settle", "2",
		"--settle-interval", "200ms", "--workspace", ws, "--grace", "300ms", "--", sh, ws)
	evs := events(t, log)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s\nevents:\n%s", r.code, r.stderr, kinds(evs))
	}
	if r.stdout != "starting\ndone\n" {
		t.Errorf("stdout %q, want the script's two lines", r.stdout)
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindVerdict && e.ActiveChannel == "workspace" }) == nil {
		t.Errorf("no CONTINUE verdict deferred by the workspace; events:\n%s", kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision }) != nil {
		t.Errorf("a decision was recorded; events:\n%s", kinds(evs))
	}
	if e := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop }); e == nil || e.Reason != watchdog.StopCompleted {
		t.Errorf("no stop event with reason completed; events:\n%s", kinds(evs))
	}
	if !strings.Contains(r.stderr, "completed after") || !strings.Contains(r.stderr, "last fresh: ") {
		t.Errorf("no summary line on stderr:\n%s", r.stderr)
	}
}

// A wedged worker, silent on stdout but repeating one line on stderr (not
// evidence: a repeated line is not work), is stopped by the idle rule: exit
// 120, the idle decision and its cancel recorded, and its whole tree, a
// child that left the process group included, gone.
func TestWedgedWorkerIsStoppedAtIdle(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(t, dir)
	sh := script(t, dir, "wedged.sh", `exec 3>"$1"
echo "working on it"
sleep 300 &
setsid sleep 300 &
while :; do echo "retrying connection..." >&2; sleep 0.1; done
`)
	log := filepath.Join(dir, "events.jsonl")
	r := runWrapper(t, dir, "--log", log, "--wall", "30s", "--idle", "500ms", "--ttl", "300ms", "--settle", "2",
		"--settle-interval", "200ms", "--grace", "300ms", "--", sh, tr.fifo)
	evs := events(t, log)
	if r.code != run.ExitIdle {
		t.Fatalf("exit %d, want %d (idle); stderr:\n%s\nevents:\n%s", r.code, run.ExitIdle, r.stderr, kinds(evs))
	}
	tr.waitGone(t, 5*time.Second, "after the idle stop")
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision && e.Rule == "idle" }) == nil {
		t.Errorf("no idle decision; events:\n%s", kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindCancel && e.Reason == "idle_exceeded" }) == nil {
		t.Errorf("no cancel with reason idle_exceeded; events:\n%s", kinds(evs))
	}
	if !strings.Contains(r.stderr, "watchdog_idle_exceeded after") {
		t.Errorf("no summary of the idle stop on stderr:\n%s", r.stderr)
	}
}

// A worker that keeps printing (busy, or looping) is stopped at the wall
// clock, with timeout(1)'s exit code 124.
func TestBusyLoopIsStoppedAtTheWallClock(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "busy.sh", `i=0
while :; do i=$((i+1)); echo "tick $i"; sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	r := runWrapper(t, dir, "--log", log, "--wall", "1500ms", "--idle", "500ms", "--grace", "300ms", "--", sh)
	evs := events(t, log)
	if r.code != run.ExitWallClock {
		t.Fatalf("exit %d, want %d (wall clock); stderr:\n%s\nevents:\n%s", r.code, run.ExitWallClock, r.stderr, kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision && e.Rule == "wall_clock" }) == nil {
		t.Errorf("no wall-clock decision; events:\n%s", kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision && e.Rule == "idle" }) != nil {
		t.Errorf("an idle decision for a busy worker; events:\n%s", kinds(evs))
	}
	if !strings.HasPrefix(r.stdout, "tick 1\ntick 2\n") {
		t.Errorf("stdout %.40q..., want the ticks passed through", r.stdout)
	}
}

// A tool call in flight (a Claude Code tool_use with no tool_result yet)
// is bounded work: the idle rule waits for it (CONTINUE, active_channel
// handler) until its cap, which is recorded (handler deadline exceeded);
// then the idle rule applies again and stops the wedged agent.
func TestToolCallInFlightDefersTheIdleRuleUntilItsCap(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	transcript, err := filepath.Abs("testdata/hung-tool.transcript")
	if err != nil {
		t.Fatal(err)
	}
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "30s", "--idle", "300ms", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--call-cap", "1500ms", "--grace", "300ms",
		"--", replayBin, "-hang", transcript)
	evs := events(t, log)
	if r.code != run.ExitIdle {
		t.Fatalf("exit %d, want %d (idle); stderr:\n%s\nevents:\n%s", r.code, run.ExitIdle, r.stderr, kinds(evs))
	}
	var deferred, capped, decided *watchdog.Event
	for i := range evs {
		e := &evs[i]
		switch {
		case e.Kind == watchdog.KindVerdict && e.ActiveChannel == "handler" && deferred == nil:
			deferred = e
		case e.Kind == watchdog.KindHandlerDeadline && e.Handler == "Bash":
			capped = e
		case e.Kind == watchdog.KindDecision && e.Rule == "idle":
			decided = e
		}
	}
	switch {
	case deferred == nil || capped == nil || decided == nil:
		t.Fatalf("want a CONTINUE on the handler, the Bash call's deadline, then the idle decision; events:\n%s", kinds(evs))
	case !(deferred.Seq < capped.Seq && capped.Seq < decided.Seq):
		t.Errorf("out of order: CONTINUE seq %d, deadline seq %d, decision seq %d; events:\n%s", deferred.Seq, capped.Seq, decided.Seq, kinds(evs))
	case capped.LimitSeconds != 1.5 || capped.Reason != "handler_deadline_exceeded":
		t.Errorf("the call's deadline: limit %vs, reason %s; want 1.5s, handler_deadline_exceeded", capped.LimitSeconds, capped.Reason)
	case decided.ElapsedSeconds < 1.5:
		t.Errorf("the idle rule decided at %.3fs, before the call's cap (1.5s)", decided.ElapsedSeconds)
	}
}

// A Claude Code stream-json transcript, replayed at its pace: every line
// passes through unchanged (the malformed ones too), the tool calls are
// recorded by name (the sub-agent's own Read included), the long Bash call
// defers the idle rule, the sub-agent's lines are subagent evidence, and
// the run completes.
func TestClaudeTranscriptReplay(t *testing.T) {
	testTranscript(t, "claude", "claude-stream-json.transcript",
		[]string{"Bash", "Task:general-purpose", "Read", "Edit"}, "subagent")
}

// An OpenAI Codex exec --json transcript, replayed at its pace: the
// command, MCP and collab items are calls with their names, a file change
// is tool-call evidence, and the idle rule never stops it although the
// agent's own messages are 2.5 s apart.
func TestCodexTranscriptReplay(t *testing.T) {
	testTranscript(t, "codex", "codex-exec-json.transcript",
		[]string{"command_execution", "mcp:github/get_issue", "collab:spawn_agent"}, "subagent")
}

func testTranscript(t *testing.T, format, name string, handlers []string, channel string) {
	dir := t.TempDir()
	path := filepath.Join("..", "agentevents", "testdata", name)
	log := filepath.Join(dir, "events.jsonl")
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	r := runWrapper(t, dir, "--log", log, "--events", format, "--wall", "30s", "--idle", "400ms", "--ttl", "500ms",
		"--settle", "2", "--settle-interval", "200ms", "--checkpoints", "100ms", "--grace", "300ms", "--", replayBin, abs)
	evs := events(t, log)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s\nevents:\n%s", r.code, r.stderr, kinds(evs))
	}
	if want := payload(t, path); r.stdout != want {
		t.Errorf("stdout is not the transcript's lines, unchanged:\n got %q\nwant %q", r.stdout, want)
	}
	for _, h := range handlers {
		if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindCallCompleted && e.Handler == h }) == nil {
			t.Errorf("no completed call %q recorded; events:\n%s", h, kinds(evs))
		}
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindVerdict && e.ActiveChannel == "handler" }) == nil {
		t.Errorf("no CONTINUE verdict on a call in flight; events:\n%s", kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool {
		for _, en := range e.EvidenceSummary {
			if en.Channel == channel && en.Counter > 0 {
				return true
			}
		}
		return false
	}) == nil {
		t.Errorf("no evidence recorded on %s; events:\n%s", channel, kinds(evs))
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision }) != nil {
		t.Errorf("a decision was recorded; events:\n%s", kinds(evs))
	}
}

// payload is what the replayer writes for a transcript.
func payload(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := transcript.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, l := range lines {
		out.WriteString(l.Text + "\n")
	}
	return out.String()
}

// SIGINT to the wrapper is forwarded to the command (its trap runs) and
// recorded as an operator's stop, with who and why; the wrapper exits 130.
func TestSIGINTIsForwardedAndRecordedAsAnOperatorStop(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "trap.sh", `trap 'echo "got INT" > "$1"; exit 0' INT
trap '' TERM
echo ready
while :; do sleep 0.1; done
`)
	log := filepath.Join(dir, "events.jsonl")
	cmd := wrapper(dir, "--log", log, "--operator", "test-operator", "--wall", "30s", "--grace", "2s", "--", sh, filepath.Join(dir, "int"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut, out bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, copied := lineWaiter(stdout, "ready", &out)
	within(t, ready, 30*time.Second, "the command's ready line")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	within(t, copied, 30*time.Second, "the wrapper's stdout to close")
	err = testwait.Call(t, cmd.Wait, "the wrapper to exit after SIGINT")
	code := cmd.ProcessState.ExitCode()
	evs := events(t, log)
	if code != 130 {
		t.Fatalf("exit %d (%v), want 130; stderr:\n%s\nevents:\n%s", code, err, errOut.String(), kinds(evs))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "int")); err != nil || string(b) != "got INT\n" {
		t.Errorf("the command's INT trap did not run (file: %q, %v): the signal was not forwarded", b, err)
	}
	stop := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop })
	if stop == nil || stop.Reason != watchdog.StopRequested || stop.By != "test-operator" || !strings.Contains(stop.Why, "SIGINT") {
		t.Errorf("stop event %+v, want reason stop_requested by test-operator, why naming SIGINT; events:\n%s", stop, kinds(evs))
	}
}

// The wrapper is SIGKILLed: its command's whole tree dies with it (the
// guard), a child that left the process group included. Run again with the
// same --session and --log, it resumes the open window: the budget counts
// from the original start, so the resumed run is stopped at the wall clock
// less than a full budget after it resumed.
func TestResumeAfterTheWrapperWasKilled(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(t, dir)
	first := script(t, dir, "first.sh", `exec 3>"$1"
sleep 300 &
setsid sleep 300 &
sleep 0.5
echo ready
wait
`)
	log := filepath.Join(dir, "events.jsonl")
	const wall = 2500 * time.Millisecond
	common := []string{"--session", "resume-me", "--log", log, "--wall", wall.String(), "--grace", "300ms"}
	cmd := wrapper(dir, append(common, "--", first, tr.fifo)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, copied := lineWaiter(stdout, "ready", &out)
	within(t, ready, 30*time.Second, "the first command's ready line")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	within(t, copied, 30*time.Second, "the first wrapper's stdout to close")
	tr.waitGone(t, 10*time.Second, "after the wrapper was SIGKILLed")

	second := script(t, dir, "second.sh", `i=0
while :; do i=$((i+1)); echo "busy $i"; sleep 0.05; done
`)
	r := runWrapper(t, dir, append(common, "--", second)...)
	evs := events(t, log)
	if r.code != run.ExitWallClock {
		t.Fatalf("exit %d, want %d; stderr:\n%s\nevents:\n%s", r.code, run.ExitWallClock, r.stderr, kinds(evs))
	}
	start := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStart })
	resume := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindResume })
	cancel := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindCancel })
	if start == nil || resume == nil || cancel == nil {
		t.Fatalf("want a start, a resume and a cancel; events:\n%s", kinds(evs))
	}
	if resume.Window != 1 || !resume.WindowStartedAt.Equal(start.WindowStartedAt) {
		t.Errorf("the resume opened window %d from %v, want window 1 from the original start %v", resume.Window, resume.WindowStartedAt, start.WindowStartedAt)
	}
	if cancel.Rule != "wall_clock" || cancel.Window != 1 || cancel.ElapsedSeconds < wall.Seconds() {
		t.Errorf("cancel: rule %s, window %d, at %.3fs; want wall_clock in window 1 at %v or later", cancel.Rule, cancel.Window, cancel.ElapsedSeconds, wall)
	}
	if got := cancel.OccurredAt.Sub(resume.OccurredAt); got > wall-400*time.Millisecond {
		t.Errorf("the resumed run ran %v before the wall clock stopped it: the budget did not count from the original start", got)
	}
	if !strings.Contains(r.stderr, "resumed: its budget counts from") {
		t.Errorf("the second run does not say it resumed:\n%s", r.stderr)
	}
}
