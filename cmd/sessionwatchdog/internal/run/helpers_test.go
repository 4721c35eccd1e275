//go:build unix

package run_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
	"github.com/sessionwatchdog/watchdog/reexec"
)

// asCommandEnv makes the test binary run "sessionwatchdog run" (run.Main)
// on its arguments: the tests start the wrapper as a real process, to
// signal or kill it.
const asCommandEnv = "SESSIONWATCHDOG_RUN_TEST_AS_COMMAND"

// replayBin is the transcript replayer (testdata/replay), built by TestMain.
var replayBin string

func TestMain(m *testing.M) {
	reexec.Init() // the wrapper's guard (and, in the test process, unused)
	if os.Getenv(asCommandEnv) == "1" {
		os.Exit(run.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "sessionwatchdog-run-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	replayBin = filepath.Join(dir, "replay")
	build := exec.Command("go", "build", "-o", replayBin, "./testdata/replay") //watchdog:unbounded go test's -timeout bounds the test binary
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the replayer:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// wrapper is "sessionwatchdog run ARGS..." as a process of its own, in dir.
func wrapper(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...) //watchdog:unbounded runWrapper kills it after a minute; the signal tests wait for it with bounds
	// A binary built with -race sleeps 1 s at exit by default
	// (atexit_sleep_ms): the wrapper and its guard must not.
	cmd.Env = append(os.Environ(), asCommandEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Dir = dir
	return cmd
}

// result is how a wrapper process ended.
type result struct {
	code           int
	stdout, stderr string
}

// runWrapper runs the wrapper to its end, bounded by a minute.
func runWrapper(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := wrapper(dir, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("sessionwatchdog run %s did not end within a minute; stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errOut.String()}
}

// script writes a shell script into dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// events reads the event log at path and checks that every recorded
// verdict re-derives (what sessionwatchdog verify does).
func events(t *testing.T, path string) []watchdog.Event {
	t.Helper()
	evs, err := eventlog.ReadFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := watchdog.Replay(evs)
	if err != nil {
		t.Fatalf("replay %s: %v", path, err)
	}
	if len(mm) > 0 {
		t.Errorf("replay %s: %d mismatches: %+v", path, len(mm), mm)
	}
	return evs
}

// find returns the first event that matches, or nil.
func find(evs []watchdog.Event, match func(e *watchdog.Event) bool) *watchdog.Event {
	for i := range evs {
		if match(&evs[i]) {
			return &evs[i]
		}
	}
	return nil
}

// kinds lists the events as "kind rule reason active_channel handler", for
// failure messages.
func kinds(evs []watchdog.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %6.3fs %s rule=%s reason=%s active=%s handler=%s\n", e.ElapsedSeconds,
			strings.TrimPrefix(e.Kind, "runtime."), e.Rule, e.Reason, e.ActiveChannel, e.Handler)
	}
	return b.String()
}

// tree is a FIFO that every process of a command's tree holds open for
// writing (the script opens it as fd 3, its children inherit it): gone is
// closed when the last of them has died, the kernel's own signal that the
// whole tree is gone, with no polling.
type tree struct {
	fifo string
	gone chan struct{}
}

func newTree(t *testing.T, dir string) *tree {
	t.Helper()
	tr := &tree{fifo: filepath.Join(dir, "tree.fifo"), gone: make(chan struct{})}
	if err := syscall.Mkfifo(tr.fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(tr.gone)
		f, err := os.Open(tr.fifo) // blocks until the script opens it
		close(opened)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, f) // EOF: every writer has closed it
		f.Close()
	}()
	t.Cleanup(func() {
		select {
		case <-opened:
		default: // the script never opened it: unblock the reader
			if f, err := os.OpenFile(tr.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
		wg.Wait()
	})
	return tr
}

// waitGone fails unless the whole tree dies within d.
func (tr *tree) waitGone(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case <-tr.gone:
	case <-time.After(d):
		t.Fatalf("%s: a process of the command's tree is still alive %v later", what, d)
	}
}

// lineWaiter reads r line by line, passing every line to all, and closes
// a channel when a line equal to want has been read.
func lineWaiter(r io.Reader, want string, all io.Writer) (seen <-chan struct{}, done <-chan struct{}) {
	s, d := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d)
		sc := bufio.NewScanner(r)
		found := false
		for sc.Scan() {
			fmt.Fprintln(all, sc.Text())
			if !found && sc.Text() == want {
				found = true
				close(s)
			}
		}
	}()
	return s, d
}

// within waits for ch, or fails after d saying what it waited for.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("waited %v for %s", d, what)
	}
}

var _ = context.Background
