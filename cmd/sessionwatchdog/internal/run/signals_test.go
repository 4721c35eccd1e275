//go:build linux

package run_test

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
	"github.com/sessionwatchdog/watchdog/internal/testproc"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// These tests are the cases of GNU coreutils' tests of timeout(1) (and of
// issue 36) that a wrapper around a real process tree must get right. Run
// them 20 times in a row with -count=20 (.ci/run does).

// started is a wrapper process that was started, with its stdout read line
// by line.
type started struct {
	cmd    *exec.Cmd
	errOut bytes.Buffer
	seen   map[string]chan struct{} // closed when the line has been read
	copied chan struct{}            // closed when stdout closed
}

// startWrapper starts the wrapper (cmd made by wrapper) and waits for the
// command's line want on its stdout; s.seen[line] is closed when one of
// lines has been read.
func startWrapper(t *testing.T, cmd *exec.Cmd, want string, lines ...string) *started {
	t.Helper()
	s := &started{cmd: cmd, seen: map[string]chan struct{}{}, copied: make(chan struct{})}
	for _, l := range append(lines, want) {
		s.seen[l] = make(chan struct{})
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &s.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pending := maps.Clone(s.seen)
	go func() {
		defer close(s.copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if ch, ok := pending[sc.Text()]; ok {
				delete(pending, sc.Text())
				close(ch)
			}
		}
	}()
	seen := s.seen[want]
	select {
	case <-seen:
	case <-s.copied:
		_ = cmd.Wait()
		t.Fatalf("the wrapper's stdout closed before the line %q; stderr:\n%s", want, s.errOut.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no line %q within 30s", want)
	}
	return s
}

// wait waits for the wrapper to exit (its stdout closed first) and returns
// its exit code.
func (s *started) wait(t *testing.T) int {
	t.Helper()
	within(t, s.copied, 30*time.Second, "the wrapper's stdout to close")
	_ = testwait.Call(t, s.cmd.Wait, "the wrapper to exit")
	return s.cmd.ProcessState.ExitCode()
}

// mustGo fails unless the whole tree dies within d; on failure it
// SIGKILLs the processes that still hold the tree's fifo, so that a
// failing test leaves nothing behind and does not hang in its cleanup.
func (tr *tree) mustGo(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-tr.gone:
		return
	case <-time.After(d):
	}
	left := testproc.KillHolders(tr.fifo)
	t.Fatalf("%s: processes of the command's tree still alive %v later (now killed):\n%s", what, d, left)
}

// A tree whose every process ignores SIGTERM, one of them in a session of
// its own holding the output pipes, is stopped at the wall clock: every
// process is gone by the time the wrapper has exited (SIGKILL at the grace),
// none left behind under init.
func TestATreeThatIgnoresSIGTERMIsGoneWhenTheWrapperExits(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(t, dir)
	sh := script(t, dir, "stubborn.sh", `exec 3>"$1"
trap '' TERM
sh -c 'trap "" TERM; while :; do sleep 0.05; done' &
setsid sh -c 'trap "" TERM; while :; do sleep 0.05; done' &
echo ready
while :; do sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	s := startWrapper(t, wrapper(dir, "--log", log, "--wall", "1s", "--grace", "300ms", "--", sh, tr.fifo), "ready")
	code := s.wait(t)
	if code != run.ExitWallClock {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, run.ExitWallClock, s.errOut.String())
	}
	// The fifo's EOF comes once the last process holding it has died; a
	// SIGKILLed process may take a moment to close its files.
	tr.mustGo(t, 2*time.Second, "after the wrapper exited")
}

// The operator's second signal SIGKILLs the whole tree at once, a
// grandchild in a session of its own that ignores SIGTERM and holds the
// output pipes included: the wrapper does not wait out the grace (30 s).
func TestASecondSignalKillsTheWholeTreeAtOnce(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(t, dir)
	sh := script(t, dir, "stubborn.sh", `exec 3>"$1"
trap 'echo "got TERM"' TERM
trap '' INT
setsid sh -c 'trap "" TERM INT; while :; do sleep 0.05; done' &
echo ready
while :; do sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	cmd := wrapper(dir, "--log", log, "--wall", "5m", "--grace", "30s", "--", sh, tr.fifo)
	s := startWrapper(t, cmd, "ready", "got TERM")
	gotTERM := s.seen["got TERM"]
	first := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The command's trap shows that the first signal was forwarded.
	select {
	case <-gotTERM:
	case <-s.copied:
		t.Fatalf("the wrapper ended after the first signal; stderr:\n%s", s.errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the first signal did not reach the command within 30s")
	}
	// A second signal is one that comes after the window of copies (100 ms):
	// a real-time property of the wrapper, so the test lets real time pass.
	time.Sleep(time.Until(first.Add(150 * time.Millisecond)))
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.copied:
	case <-time.After(10 * time.Second):
		tr.mustGo(t, 0, "10s after the second signal (the grace is 30s): the wrapper still waits")
	}
	code := s.wait(t)
	if code != 143 {
		t.Errorf("exit %d, want 143 (the operator's SIGTERM); stderr:\n%s", code, s.errOut.String())
	}
	tr.mustGo(t, 2*time.Second, "after the second signal")
}

// Nested runs: the outer wrapper forwards the operator's signal to the
// inner wrapper's group, then its kill signals the inner wrapper's pid and
// group (and its guard once more), within milliseconds. The inner wrapper
// counts the copies as one signal: its command's SIGTERM handler, which
// takes its time, runs to its end instead of being SIGKILLed.
func TestCopiesOfASignalWithinTheWindowCountOnce(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, "handled")
	sh := script(t, dir, "handler.sh", `trap 'i=0; while [ $i -lt 5 ]; do i=$((i+1)); sleep 0.05; done; echo handled > "$1"; exit 0' TERM
echo ready
while :; do sleep 0.05; done
`)
	outerLog, innerLog := filepath.Join(dir, "outer.jsonl"), filepath.Join(dir, "inner.jsonl")
	s := startWrapper(t, wrapper(dir, "--log", outerLog, "--wall", "5m", "--grace", "10s", "--",
		os.Args[0], "--log", innerLog, "--wall", "5m", "--grace", "10s", "--", sh, done), "ready")
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := s.wait(t)
	if code != 143 {
		t.Errorf("outer exit %d, want 143; stderr:\n%s", code, s.errOut.String())
	}
	if b, err := os.ReadFile(done); err != nil || string(b) != "handled\n" {
		t.Errorf("the command's SIGTERM handler did not run to its end (%q, %v): the inner wrapper took a copy of the signal for a second one; stderr:\n%s", b, err, s.errOut.String())
	}
	if strings.Contains(s.errOut.String(), "SIGKILL") {
		t.Errorf("stderr:\n%s", s.errOut.String())
	}
}

// The wrapper is SIGKILLed: the command's first signal is SIGTERM (not the
// SIGHUP that a parent-death signal would look like), and its SIGTERM
// handler can still write its last line to stderr, whose reader died with
// the wrapper: it does not die of SIGPIPE.
func TestWhenTheWrapperIsKilledTheCommandGetsSIGTERMFirstAndWritesItsLastLine(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(t, dir)
	sigs := filepath.Join(dir, "signals")
	sh := script(t, dir, "handler.sh", `exec 3>"$1"
trap 'echo HUP >> "$2"' HUP
trap 'echo TERM >> "$2"; echo "last line" >&2; echo "last line" ; echo written >> "$2"; exit 0' TERM
echo ready
while :; do sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	s := startWrapper(t, wrapper(dir, "--log", log, "--wall", "5m", "--grace", "5s", "--", sh, tr.fifo, sigs), "ready")
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	tr.mustGo(t, 10*time.Second, "after the wrapper was SIGKILLed")
	b, err := os.ReadFile(sigs)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "TERM\nwritten\n" {
		t.Errorf("the command's signals and handler: %q, want %q (SIGTERM first, its last line written)", got, "TERM\nwritten\n")
	}
}

// The reader of the wrapper's own stderr (and stdout) is gone from the
// start (sessionwatchdog run ... 2>&1 | head -0): the wrapper does not die
// of SIGPIPE; it runs the command and records the window's end.
func TestTheWrapperSurvivesEPIPEOnItsOwnStderrAndRecordsTheWindowsEnd(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := wrapper(dir, "--log", log, "--", "sh", "-c", "exit 3")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	_ = testwait.Call(t, cmd.Wait, "the wrapper to exit")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || ws.ExitStatus() != 3 {
		t.Fatalf("the wrapper ended with %v, want exit 3 (the command's)", cmd.ProcessState)
	}
	evs := events(t, log)
	stop := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop })
	if stop == nil || stop.Reason != watchdog.StopFailed {
		t.Errorf("no stop event with reason failed: the window's end was not recorded; events:\n%s", kinds(evs))
	}
}

// Under nohup (SIGHUP ignored) or as a background job of a
// non-interactive shell (SIGINT ignored), the wrapper leaves both ignored:
// a hang-up or an interrupt does not stop the command, and the command
// inherits the ignore. Then a SIGTERM is the operator's stop.
func TestAnIgnoredHangUpOrInterruptStaysIgnoredForTheWrapperAndTheCommand(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "nohup.sh", `kill -HUP $$
kill -INT $$
echo ready
while :; do sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	w := wrapper(dir, "--log", log, "--wall", "5m", "--grace", "2s", "--", sh)
	cmd := exec.Command("sh", append([]string{"-c", `trap "" HUP INT; exec "$@"`, "sh", w.Path}, w.Args[1:]...)...) //watchdog:unbounded startWrapper and wait bound it
	cmd.Env, cmd.Dir = w.Env, w.Dir
	s := startWrapper(t, cmd, "ready") // the command survived its own SIGHUP and SIGINT
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM} {
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	code := s.wait(t)
	evs := events(t, log)
	stop := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop })
	if code != 143 || stop == nil || !strings.Contains(stop.Why, "SIGTERM") {
		t.Errorf("exit %d, stop %+v; want 143, the operator's SIGTERM (SIGHUP and SIGINT ignored); stderr:\n%s", code, stop, s.errOut.String())
	}
}

// SIGQUIT (Ctrl-\) is an operator's stop like SIGINT: forwarded, recorded,
// the window ended in the log, exit 131; no goroutine dump. (The command's
// tree gets SIGTERM right after, as for any stop: the script ignores it, so
// that its QUIT trap runs whichever comes first.)
func TestSIGQUITIsAnOperatorStopWithTheWindowEndedAndNoGoroutineDump(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "quit.sh", `trap 'echo "got QUIT" > "$1"; exit 0' QUIT
trap '' TERM
echo ready
while :; do sleep 0.05; done
`)
	log := filepath.Join(dir, "events.jsonl")
	s := startWrapper(t, wrapper(dir, "--log", log, "--wall", "5m", "--grace", "2s", "--", sh, filepath.Join(dir, "quit")), "ready")
	if err := s.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	code := s.wait(t)
	evs := events(t, log)
	stop := find(evs, func(e *watchdog.Event) bool { return e.Kind == watchdog.KindStop })
	if code != 131 || stop == nil || stop.Reason != watchdog.StopRequested || !strings.Contains(stop.Why, "SIGQUIT") {
		t.Errorf("exit %d, stop %+v; want 131 and the operator's stop naming SIGQUIT; stderr:\n%s", code, stop, s.errOut.String())
	}
	if strings.Contains(s.errOut.String(), "goroutine ") {
		t.Errorf("a goroutine dump on stderr:\n%.2000s", s.errOut.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "quit")); err != nil || string(b) != "got QUIT\n" {
		t.Errorf("the command's QUIT trap did not run (%q, %v): the signal was not forwarded", b, err)
	}
}

// A file without its execute bit found on PATH, and ".", cannot be
// executed: 126, as a shell and timeout(1) say, not 127 (not found).
func TestANonExecutableOnPATHIs126(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "no-x-bit"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"no-x-bit", "."} {
		cmd := wrapper(dir, "--log", filepath.Join(dir, "events.jsonl"), "--", name)
		cmd.Env = append(cmd.Env, "PATH="+bin+":"+dir)
		var errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &errOut
		_ = testwait.Call(t, cmd.Run, "the wrapper to exit")
		if code := cmd.ProcessState.ExitCode(); code != run.ExitNotExecutable {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", name, code, run.ExitNotExecutable, errOut.String())
		}
	}
}
