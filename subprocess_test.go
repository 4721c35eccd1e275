//go:build linux

package watchdog_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// TestMain lets the test binary double as the helper processes below.
func TestMain(m *testing.M) {
	if dir := os.Getenv("WATCHDOG_HELPER_WRITE_FILES"); dir != "" {
		silentFileWriter(dir)
		return
	}
	switch os.Getenv("WATCHDOG_HELPER") {
	case "setsid":
		// A command whose child leaves its process group (setsid) and
		// keeps running.
		c := exec.Command("sleep", "1000") //watchdog:unbounded the point: a child that escapes its group, killed by the test
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			os.Exit(2)
		}
		fmt.Println(c.Process.Pid)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		return
	case "orchestrator":
		// An orchestrator that starts a command, then is SIGKILLed.
		c := watchdog.Command(context.Background(), time.Second, "sleep", "1000")
		if err := c.Start(); err != nil {
			os.Exit(2)
		}
		fmt.Println(c.Process.Pid)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		return
	}
	os.Exit(m.Run())
}

// silentFileWriter writes one file per line read from stdin, never a byte to
// stdout: a quiet agent doing real file work. It writes to an ignored
// temporary name and renames, so each file is one workspace change.
func silentFileWriter(dir string) {
	in := bufio.NewScanner(os.Stdin)
	for i := 0; in.Scan(); i++ {
		tmp := filepath.Join(dir, fmt.Sprintf("f%d.tmp", i))
		if err := os.WriteFile(tmp, []byte(in.Text()), 0o600); err != nil {
			os.Exit(2)
		}
		if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f%d.txt", i))); err != nil {
			os.Exit(3)
		}
	}
}

// groupCommand starts name in its own process group, killed as a whole
// (SIGKILL to the group) when ctx ends.
func groupCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// liveInGroup lists the processes of group pgid that are not zombies.
func liveInGroup(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...
		rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			live = append(live, pid)
		}
	}
	return live
}

// requireGroupGone fails unless every process of group pgid has exited. A
// process that closed its pipes may still be on its way out (killed, not yet
// a zombie); a pidfd becomes readable exactly when it has exited, so the
// test waits for that event (10 s is only a safety net, never reached when
// the group was killed).
// requireGone waits, up to 10 s, for process pid to exit (a pidfd polls
// readable when it does).
func requireGone(t *testing.T, pid int, what string) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
	require.NoError(t, err)
	require.Equal(t, 1, n, "%s (pid %d) is still alive", what, pid)
}

// helperCommand runs this test binary as the helper mode, with a pipe to
// its stdin (it runs until killed) and its stdout's first line parsed as
// a pid.
func helperCommand(t *testing.T, cmd *exec.Cmd, mode string) (pid int) {
	t.Helper()
	cmd.Env = append(os.Environ(), "WATCHDOG_HELPER="+mode)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = stdin.Close() })
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err = strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	return pid
}

// A process that left the command's group (setsid) is stopped with it, and
// the outcome is recorded: every process was gone within the grace.
func TestCommandStopsADescendantThatLeftItsGroup(t *testing.T) {
	mock := newMock()
	killed := make(chan watchdog.Event, 1)
	w := newWatchdog(t, mock, watchdog.NewMemoryStore(), watchdog.WithObserver(watchdog.Observer{OnEvent: func(e watchdog.Event) {
		if e.Kind == watchdog.KindProcessKilled {
			killed <- e
		}
	}}))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(s.Context())
	cmd := watchdog.Command(ctx, 200*time.Millisecond, os.Args[0], "-test.run=^$")
	grandchild := helperCommand(t, cmd, "setsid")
	cancel()
	_ = testwait.Call(t, cmd.Wait, "the cancelled command to exit")
	requireGone(t, grandchild, "the setsid grandchild")
	e := testwait.For(t, killed, "the kill's record")
	assert.Equal(t, filepath.Base(os.Args[0]), e.Handler)
	assert.Equal(t, "sigterm", e.Reason)
	assert.Zero(t, e.ProcessesAlive)
	assert.Equal(t, 0.2, e.LimitSeconds)
}

// A command dies with an orchestrator that is SIGKILLed (the kernel's
// parent-death signal): the orchestrator runs as a child process here.
func TestACommandDiesWithItsKilledOrchestrator(t *testing.T) {
	orch := exec.Command(os.Args[0], "-test.run=^$") //watchdog:unbounded the test SIGKILLs this orchestrator itself
	child := helperCommand(t, orch, "orchestrator")
	require.NoError(t, orch.Process.Kill())
	_ = testwait.Call(t, orch.Wait, "the killed orchestrator to exit")
	requireGone(t, child, "the command of the killed orchestrator")
}

func requireGroupGone(t *testing.T, pgid int) {
	t.Helper()
	for _, pid := range liveInGroup(t, pgid) {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // already gone
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
		_ = unix.Close(fd)
		require.NoError(t, err)
		require.Equal(t, 1, n, "process %d of group %d is still alive", pid, pgid)
	}
}

// A real process that writes files silently is kept alive by the
// workspace monitor; a sleep with no output is killed at the idle window with
// its whole process group.
func TestRealSubprocessesQuietFileWorkLivesSilentSleepDies(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(context.Background())
	changes := make(chan string, 64)
	watchdog.SetWorkspaceHook(w, func(s *watchdog.Session, _ string) { changes <- s.ID() })
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: 5 * time.Second, SettleChecks: 1}

	// The quiet worker.
	worker, err := w.Start(context.Background(), "worker", t0, p)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, worker.WatchWorkspace(dir, ".git/", "*.tmp"))
	wcmd := groupCommand(worker.Context(), os.Args[0])
	wcmd.Env = append(os.Environ(), "WATCHDOG_HELPER_WRITE_FILES="+dir)
	wcmd.Stdout = worker.Writer(watchdog.ChannelStdout, nil)
	stdin, err := wcmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, wcmd.Start())
	worker.Touch(watchdog.ChannelStdout) // the agent announced itself at t0

	// The silent sleeper: a shell with a sleeping child of its own.
	sleeper, err := w.Start(context.Background(), "sleeper", t0, p)
	require.NoError(t, err)
	scmd := groupCommand(sleeper.Context(), "sh", "-c", "sleep 1000 & sleep 1000")
	scmd.Stdout = sleeper.Writer(watchdog.ChannelStdout, nil)
	require.NoError(t, scmd.Start())
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- scmd.Wait() }()

	for i := 0; i < 6; i++ { // 24 s of file work, well past the 10 s idle window
		advance(t, mock, 4*time.Second, w)
		_, err := fmt.Fprintf(stdin, "step %d\n", i)
		require.NoError(t, err)
		require.Equal(t, "worker", testwait.For(t, changes, "the monitor to record the worker's new file")) // the monitor recorded the new file
	}
	advance(t, mock, time.Second, w)

	require.ErrorIs(t, context.Cause(sleeper.Context()), watchdog.ErrIdleExceeded)
	require.Error(t, testwait.For(t, sleeperDone, "the killed sleeper to exit"), "the sleeper was killed")
	requireGroupGone(t, scmd.Process.Pid) // no process of the sleeper's group is left
	sev := load(t, store, "sleeper")
	d := ofKind(sev, watchdog.KindDecision)
	require.Len(t, d, 1)
	assert.Equal(t, t0.Add(10*time.Second+1), d[0].OccurredAt)

	require.NoError(t, worker.Context().Err(), "quiet file work keeps the worker alive")
	wev := load(t, store, "worker")
	conts := ofKind(wev, watchdog.KindVerdict)
	require.NotEmpty(t, conts)
	for _, c := range conts {
		assert.Equal(t, "workspace", c.ActiveChannel)
	}
	assert.Empty(t, ofKind(wev, watchdog.KindDecision))

	// The worker finishes its work and goes quiet: now it is idle.
	require.NoError(t, stdin.Close())
	require.NoError(t, testwait.Call(t, wcmd.Wait, "the worker to exit once its input is closed"))
	advance(t, mock, 10*time.Second, w)
	require.ErrorIs(t, context.Cause(worker.Context()), watchdog.ErrIdleExceeded)
	requireGroupGone(t, wcmd.Process.Pid)
}

// A subprocess handler (a real sleep with a child of its
// own) is killed with its whole process group when its deadline fires.
func TestSubprocessHandlerIsKilledWithItsWholeGroup(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{HandlerGrace: time.Minute})
	require.NoError(t, err)

	pids := make(chan int, 1)
	started := make(chan struct{})
	res := callAsync(s.Context(), "shell_tool", 2*time.Second, func(ctx context.Context) error {
		defer watchdog.Step(ctx, "sh sleep")()
		cmd := watchdog.Command(ctx, 5*time.Second, "sh", "-c", "sleep 1000 & echo started; sleep 1000")
		// Not an *os.File: Wait returns only once every process of the
		// group has closed its stdout, that is, has died.
		cmd.Stdout = s.Writer(watchdog.ChannelStdout, &firstWrite{ch: started})
		if err := cmd.Start(); err != nil {
			return err
		}
		pids <- cmd.Process.Pid
		return cmd.Wait()
	})
	pgid := testwait.For(t, pids, "the child's pid")
	testwait.For(t, started, "the function to start")
	require.GreaterOrEqual(t, len(liveInGroup(t, pgid)), 2, "sh and its background sleep run")
	advance(t, mock, 2*time.Second, w)
	err = testwait.For(t, res, "the call's result")
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	assert.Equal(t, "sh sleep", v.DyingSpan)
	requireGroupGone(t, pgid) // no process of the group is left
	abandoned := w.Stats().AbandonedHandlers
	assert.Zero(t, abandoned, "the handler returned once its group was killed")
}

type firstWrite struct {
	once sync.Once
	ch   chan struct{}
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { close(f.ch) })
	return len(p), nil
}

// A group that ignores SIGTERM gets SIGKILL after the grace period.
func TestCommandEscalatesToSIGKILLForAGroupIgnoringSIGTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r, wp, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd := watchdog.Command(ctx, 200*time.Millisecond, "sh", "-c", `trap "" TERM; sleep 1000 & echo started; wait`)
	cmd.Stdout = wp // every process of the group inherits the write end
	require.NoError(t, cmd.Start())
	require.NoError(t, wp.Close())
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)
	cancel()
	require.Error(t, testwait.Call(t, cmd.Wait, "the cancelled command to exit"))
	// EOF comes only when the last process holding the pipe has died:
	// here, when SIGKILL ended the sleep that ignored SIGTERM.
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Empty(t, rest)
	requireGroupGone(t, cmd.Process.Pid)
}
