//go:build unix

package run_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
)

// agentTranscript is the absolute path of a transcript of the agentevents
// package's testdata.
func agentTranscript(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "agentevents", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// completed returns the recorded end of the call named handler.
func completed(evs []watchdog.Event, handler string) *watchdog.Event {
	return find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindCallCompleted && e.Handler == handler })
}

// A Claude Code background sub-agent is bounded from its task_started to
// its task_notification: the parent's result (0.3 s) ends neither the task
// nor the sub-agent's own Bash call, which keeps running 1.5 s with stdout
// silent (five idle windows); the idle rule waits for them (CONTINUE on
// the handler), the post-turn grace does not start while they run, and
// the run completes. Before, the task lines counted as stdout only and the
// result ended the Bash call: the idle rule stopped the agent (exit 120).
func TestABackgroundSubagentIsBoundedUntilItsNotificationNotByTheParentsResult(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "30s", "--idle", "300ms", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--post-turn-grace", "500ms", "--grace", "300ms",
		"--", replayBin, agentTranscript(t, "claude-background-task.transcript"))
	evs := events(t, log)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s\nevents:\n%s", r.code, r.stderr, kinds(evs))
	}
	task, bash := completed(evs, "task:local_agent"), completed(evs, "Bash")
	switch {
	case task == nil || bash == nil:
		t.Fatalf("want the task and the sub-agent's Bash call completed; events:\n%s", kinds(evs))
	case task.Reason != "ok" || bash.Reason != "ok":
		t.Errorf("task %s, Bash %s; want both ok", task.Reason, bash.Reason)
	case task.MeasureSeconds < 1.5 || bash.MeasureSeconds < 1.4:
		t.Errorf("the task ran %.3fs (want >= 1.5: to its notification), Bash %.3fs (want >= 1.4: to its result, not the parent's)", task.MeasureSeconds, bash.MeasureSeconds)
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindVerdict && e.ActiveChannel == "handler" }) == nil {
		t.Errorf("no CONTINUE verdict on the calls in flight; events:\n%s", kinds(evs))
	}
}

// A tool call the agent reports failed is recorded failed (reason error,
// with the stream's word for it), in every format, and the others ok.
func TestAFailedToolCallIsRecordedFailedInEveryFormat(t *testing.T) {
	for _, tc := range []struct{ format, transcript, failed, ok string }{
		{"claude", "claude-stream-json.transcript", "Bash", "Edit"},
		{"codex", "codex-exec-json.transcript", "command_execution", "mcp:github/get_issue"},
		{"gemini", "gemini-stream-json.transcript", "read_file", "replace"},
		{"cursor", "cursor-stream-json.transcript", "read", "edit"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "events.jsonl")
			r := runWrapper(t, dir, "--log", log, "--events", tc.format, "--wall", "30s", "--grace", "300ms",
				"--", replayBin, "-speed", "4", agentTranscript(t, tc.transcript))
			evs := events(t, log)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s\nevents:\n%s", r.code, r.stderr, kinds(evs))
			}
			f, ok := completed(evs, tc.failed), completed(evs, tc.ok)
			switch {
			case f == nil || ok == nil:
				t.Fatalf("want %s and %s completed; events:\n%s", tc.failed, tc.ok, kinds(evs))
			case f.Reason != "error" || !strings.Contains(f.Error, "failed"):
				t.Errorf("%s: reason %q error %q; want error, the agent reported it failed", tc.failed, f.Reason, f.Error)
			case ok.Reason != "ok":
				t.Errorf("%s: reason %q, want ok", tc.ok, ok.Reason)
			}
		})
	}
}

// Gemini CLI and Cursor stream-json runs, replayed at their pace: every
// line passes through unchanged, the tool calls are recorded by name, the
// long shell call defers the idle rule, and the run completes.
func TestGeminiAndCursorTranscriptReplays(t *testing.T) {
	t.Run("gemini", func(t *testing.T) {
		testTranscript(t, "gemini", "gemini-stream-json.transcript", []string{"run_shell_command", "read_file", "replace"}, "mcp_tool")
	})
	t.Run("cursor", func(t *testing.T) {
		testTranscript(t, "cursor", "cursor-stream-json.transcript", []string{"shell", "read", "edit"}, "mcp_tool")
	})
}

// A tool result line of 6 MiB ends its call as soon as it has been read:
// the call is recorded completed 0.1 s after its start, although the agent
// writes on for a second and exits without a result line. Before, a line
// over 4 MiB was not parsed and its call stayed in flight until the
// command ended.
func TestAResultLineOfMegabytesEndsItsCallWhenItArrives(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	sh := script(t, dir, "big.sh", `
printf '%s\n' '{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_big","name":"Read","input":{"file_path":"/x"}}]},"parent_tool_use_id":null}'
sleep 0.1
printf '%s' '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"'
head -c 6291456 /dev/zero | tr '\0' a
printf '%s\n' '","tool_use_id":"toolu_big"}]},"parent_tool_use_id":null}'
sleep 1.2
printf '%s\n' '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"done"}]},"parent_tool_use_id":null}'
`)
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "30s", "--grace", "300ms", "--", sh)
	evs := events(t, log)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s\nevents:\n%s", r.code, r.stderr[:min(len(r.stderr), 2000)], kinds(evs))
	}
	if len(r.stdout) < 6<<20 {
		t.Errorf("stdout: %d bytes, want the 6 MiB line passed through", len(r.stdout))
	}
	c := completed(evs, "Read")
	switch {
	case c == nil:
		t.Fatalf("the Read call was not recorded; events:\n%s", kinds(evs))
	case c.MeasureSeconds >= 1.0:
		t.Errorf("the Read call ran %.3fs: it ended with the command, not at its result line", c.MeasureSeconds)
	}
}

// An agent that ended its turn (its result is read) and then neither exits
// nor starts anything is stopped after the post-turn grace with its own
// outcome: exit 123, recorded as a stop by "sessionwatchdog run" whose why
// says finished_not_exited. Before, the idle rule stopped it: exit 120,
// the code of a real stall.
func TestAnAgentThatFinishedItsTurnButDidNotExitIsStoppedWithItsOwnOutcome(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "30s", "--idle", "2s", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--post-turn-grace", "500ms", "--grace", "300ms",
		"--", replayBin, "-speed", "4", "-hang", agentTranscript(t, "claude-stream-json.transcript"))
	evs := events(t, log)
	if r.code != run.ExitFinishedNotExited {
		t.Fatalf("exit %d, want %d; stderr:\n%s\nevents:\n%s", r.code, run.ExitFinishedNotExited, r.stderr, kinds(evs))
	}
	stop := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop })
	if stop == nil || stop.Reason != watchdog.StopRequested || stop.By != "sessionwatchdog run" || !strings.HasPrefix(stop.Why, "finished_not_exited") {
		t.Errorf("stop: %+v; want stop_requested by sessionwatchdog run, why finished_not_exited...", stop)
	}
	if find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindDecision }) != nil {
		t.Errorf("a decision was recorded: the idle rule fired; events:\n%s", kinds(evs))
	}
	if !strings.Contains(r.stderr, "finished_not_exited") {
		t.Errorf("the summary does not say finished_not_exited:\n%s", r.stderr)
	}
}

// An agent that stalls in the middle of its turn (no result) is a real
// stall: the idle rule stops it with 120, the post-turn grace does not
// apply.
func TestAStallMidTurnKeepsExit120(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	sh := script(t, dir, "stall.sh", `
printf '%s\n' '{"type":"system","subtype":"init","session_id":"s"}'
printf '%s\n' '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"thinking..."}]},"parent_tool_use_id":null}'
exec sleep 60
`)
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "30s", "--idle", "300ms", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--post-turn-grace", "200ms", "--grace", "300ms", "--", sh)
	evs := events(t, log)
	if r.code != run.ExitIdle {
		t.Fatalf("exit %d, want %d (idle); stderr:\n%s\nevents:\n%s", r.code, run.ExitIdle, r.stderr, kinds(evs))
	}
}

// With --events and --stdout lines, a line that is not an event and
// repeats one of the last 8 (a heartbeat beside the stream) is not work:
// the idle rule stops the agent that prints only that. Without --stdout
// lines every such line is evidence, as before. Before, --events refused
// --stdout lines (exit 2).
func TestARepeatedNonEventLineBesideTheStreamIsNotWork(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "beat.sh", `
printf '%s\n' '{"type":"system","subtype":"init","session_id":"s"}'
while :; do echo "heartbeat: alive"; sleep 0.05; done
`)
	log := filepath.Join(dir, "lines.jsonl")
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--stdout", "lines", "--wall", "20s", "--idle", "300ms", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--grace", "300ms", "--", sh)
	evs := events(t, log)
	if r.code != run.ExitIdle {
		t.Fatalf("--stdout lines: exit %d, want %d (idle); stderr:\n%s\nevents:\n%s", r.code, run.ExitIdle, r.stderr, kinds(evs))
	}
	log = filepath.Join(dir, "all.jsonl")
	r = runWrapper(t, dir, "--log", log, "--events", "claude", "--wall", "2500ms", "--idle", "1s", "--ttl", "200ms",
		"--settle", "1", "--settle-interval", "100ms", "--grace", "300ms", "--", sh)
	if r.code != run.ExitWallClock {
		t.Fatalf("--stdout all: exit %d, want %d (the heartbeat is evidence: the wall clock stops it); stderr:\n%s", r.code, run.ExitWallClock, r.stderr)
	}
}

// In shadow mode the post-turn grace stops nothing: it says so on stderr,
// and the agent runs on until it exits by itself.
func TestInShadowModeAFinishedAgentIsNotStopped(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	sh := script(t, dir, "late.sh", `
printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"result":"done"}'
sleep 1
`)
	r := runWrapper(t, dir, "--log", log, "--events", "claude", "--mode", "shadow", "--wall", "30s", "--post-turn-grace", "300ms", "--grace", "300ms", "--", sh)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 (it exits by itself); stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "shadow mode, not stopped: finished_not_exited") {
		t.Errorf("stderr does not say the finished agent was not stopped:\n%s", r.stderr)
	}
}
