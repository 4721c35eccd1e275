//go:build linux

package reexec_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testproc"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/reexec"
)

// orchestratorEnv makes the test binary an orchestrator that starts the
// script named by its arguments with watchdog.Command, then waits to be
// killed.
const orchestratorEnv = "REEXEC_TEST_ORCHESTRATOR"

func TestMain(m *testing.M) {
	reexec.Init() // the one line: a guard runs here and exits
	if os.Getenv(orchestratorEnv) == "1" {
		cmd := watchdog.Command(context.Background(), time.Second, "sh", os.Args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tree is a FIFO that every process of a command's tree holds open (fd 3):
// its reader sees EOF when the last of them has died.
func tree(t *testing.T) (fifo string, gone <-chan struct{}) {
	t.Helper()
	fifo = filepath.Join(t.TempDir(), "tree.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		f, err := os.Open(fifo) // until the script opens it
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, f)
		f.Close()
	}()
	return fifo, ch
}

// The orchestrator process is SIGKILLed: every process that Command
// started dies, a child, a grandchild in a session of its own that ignores
// SIGTERM, and the command itself, which ignores SIGTERM too (SIGKILL after
// the grace, 1 s).
func TestEveryProcessOfACommandDiesWithItsKilledOrchestrator(t *testing.T) {
	fifo, gone := tree(t)
	const script = `exec 3>"$1"
trap '' TERM
sleep 300 &
setsid sh -c 'trap "" TERM; while :; do sleep 0.05; done' &
echo ready
wait
`
	orch := exec.Command(os.Args[0], "-c", script, "sh", fifo) //watchdog:unbounded the test SIGKILLs this orchestrator itself
	orch.Env = append(os.Environ(), orchestratorEnv+"=1")
	stdin, err := orch.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := orch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := orch.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	if line := testwait.For(t, ready, "the command's ready line"); line != "ready\n" {
		t.Fatalf("the orchestrator wrote %q", line)
	}
	if err := orch.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = testwait.Call(t, orch.Wait, "the killed orchestrator to exit")
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatalf("10s after the orchestrator was SIGKILLed, processes of its command are alive (now killed):\n%s", testproc.KillHolders(fifo))
	}
}

// Under the guard, cmd.Process is the guard, and what Wait reports is the
// command's: its exit code, or its death by a signal; the files appended
// to ExtraFiles reach the command from descriptor 3.
func TestUnderTheGuardWaitReportsTheCommandsStatusAndExtraFilesReachIt(t *testing.T) {
	ctx := context.Background()
	cmd := watchdog.Command(ctx, time.Second, "sh", "-c", "exit 3")
	if err := testwait.Call(t, cmd.Run, "sh to exit"); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("exit 3: Run returned %v", err)
	}
	if cmd.Path == "/bin/sh" || cmd.Args[len(cmd.Args)-3] != "sh" {
		t.Errorf("not under the guard: Path %s, Args %q", cmd.Path, cmd.Args)
	}
	cmd = watchdog.Command(ctx, time.Second, "sh", "-c", "kill -TERM $$")
	_ = testwait.Call(t, cmd.Run, "sh to exit")
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("killed by SIGTERM: %v", cmd.ProcessState)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd = watchdog.Command(ctx, time.Second, "sh", "-c", "echo through >&3")
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	err = testwait.Call(t, cmd.Run, "sh to exit")
	w.Close()
	got, _ := io.ReadAll(r)
	if err != nil || string(got) != "through\n" {
		t.Errorf("ExtraFiles[1]: %q, %v; want the command's line on its descriptor 3", got, err)
	}
}
