//go:build linux

package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The guard: on Linux the wrapper runs CMD under a small process of its own
// executable, the guard, which watchdog.Command starts (so the guard leads
// the process group that the library kills). The guard
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER): a process of CMD's
//     tree whose parent dies is reparented to the guard, not to init, so
//     it stays in the tree that Command's kill walks, and the guard can
//     find it, even after it left the process group (setsid);
//   - asks for SIGHUP when the wrapper dies (PR_SET_PDEATHSIG), instead of
//     the SIGKILL that Command sets: then it sends SIGTERM to every process
//     below it, and SIGKILL after the grace to those still alive;
//   - starts CMD with PR_SET_PDEATHSIG SIGKILL, so CMD dies if the guard
//     itself is SIGKILLed;
//   - when CMD ends by itself, terminates what CMD left running below it
//     the same way, then exits with CMD's status (128+N if signal N killed
//     it).
//
// The environment tells a process it is the guard.
const (
	guardEnv       = "SESSIONWATCHDOG_RUN_GUARD"
	guardGraceEnv  = "SESSIONWATCHDOG_RUN_GUARD_GRACE"
	guardParentEnv = "SESSIONWATCHDOG_RUN_GUARD_PARENT"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// The parent-death signal is a property of a thread; the guard's main
// thread inherited SIGKILL from Command. Package initialization runs on the
// main thread, so the guard changes it here, before anything else runs.
func init() {
	if os.Getenv(guardEnv) == "1" {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGHUP), 0)
	}
}

// IsGuard reports whether this process is the guard of a run (see
// GuardMain): the sessionwatchdog command checks it first.
func IsGuard() bool { return os.Getenv(guardEnv) == "1" }

// command returns the exec.Cmd that runs path with argv (argv[0] as the
// user wrote it) through the guard, under watchdog.Command's kill of ctx.
func command(ctx context.Context, grace time.Duration, path string, argv []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the guard (this executable): %w", err)
	}
	// Command records the kill under the base name of its name: CMD's.
	cmd := watchdog.Command(ctx, grace, path, argv[1:]...)
	cmd.Path = self
	cmd.Args = append([]string{self, path}, argv...)
	cmd.Env = append(os.Environ(), guardEnv+"=1", guardGraceEnv+"="+grace.String(),
		guardParentEnv+"="+strconv.Itoa(os.Getpid()))
	return cmd, nil
}

// GuardMain is the guard's program: args are CMD's path, then its argv
// (the name as the user wrote it, and its arguments). It returns CMD's
// exit status.
func GuardMain(args []string) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	grace, err := time.ParseDuration(os.Getenv(guardGraceEnv))
	if err != nil || grace <= 0 {
		grace = defaultGrace
	}
	parent, _ := strconv.Atoi(os.Getenv(guardParentEnv))
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "sessionwatchdog run guard: no command")
		return ExitFailed
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "sessionwatchdog run guard: PR_SET_CHILD_SUBREAPER: %v\n", e)
	}
	if os.Getppid() != parent {
		return ExitFailed // the wrapper died before CMD started: start nothing
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SESSIONWATCHDOG_RUN_GUARD") {
			env = append(env, kv)
		}
	}
	pid, err := syscall.ForkExec(args[0], args[1:], &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "sessionwatchdog run: %s: %v\n", args[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return ExitNotFound
		}
		return ExitNotExecutable
	}

	// Reap every child, CMD's reparented descendants included.
	cmdDone := make(chan syscall.WaitStatus, 1)
	allGone := make(chan struct{})
	go func() {
		defer close(allGone)
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return // ECHILD: no child left
			}
			if wpid == pid {
				cmdDone <- ws
			}
		}
	}()

	for {
		select {
		case ws := <-cmdDone:
			terminateTree(grace, allGone)
			if ws.Signaled() {
				return ExitSignalBase + int(ws.Signal())
			}
			return ws.ExitStatus()
		case sig := <-sigs:
			if sig == syscall.SIGHUP && os.Getppid() != parent {
				// The wrapper is gone: nobody else will stop the tree.
				terminateTree(grace, allGone)
				return ExitSignalBase + int(syscall.SIGHUP)
			}
			if sig == syscall.SIGHUP {
				_ = syscall.Kill(pid, syscall.SIGHUP)
			}
			// SIGINT, SIGTERM, SIGQUIT came to the whole group (the
			// wrapper's forward, Command's kill): CMD has its own copy.
		}
	}
}

// terminateTree sends SIGTERM to every process below this one, then SIGKILL
// after grace to those still alive, and waits (at most a second more) for
// the reaper to have collected them.
func terminateTree(grace time.Duration, allGone <-chan struct{}) {
	self := os.Getpid()
	procs := below(self)
	if len(procs) == 0 {
		return
	}
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if len(below(self)) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: no process event to wait on
	}
	for _, p := range below(self) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	select {
	case <-allGone:
	case <-time.After(time.Second):
	}
}

// below lists the live processes below root in the process tree, from
// /proc (zombies, which are dead, left out).
func below(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	children := map[int][]int{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) S ppid ...": the fields after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
