//go:build linux

// Package guard is the re-exec guard behind watchdog.Command (opted into
// with reexec.Init): a small process of the orchestrator's own executable
// that starts the command, stays its parent, and makes sure that every
// process of the command's tree dies, even when the orchestrator is
// SIGKILLed.
//
// The guard
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER): a process of the tree
//     whose parent dies is reparented to the guard, not to init, so every
//     process the command started stays below it, whatever process group
//     or session it moved to;
//   - holds the read end of a pipe whose only write end the orchestrator
//     holds (the life pipe): it reads EOF when the orchestrator process is
//     gone, however it died, and then sends SIGTERM to every process below
//     it and SIGKILL after the grace. Unlike PR_SET_PDEATHSIG, which fires
//     when the thread that started the child ends, the pipe tells a dying
//     orchestrator from an operator's signal;
//   - on SIGTERM (Command's kill, or a signal to its pid) sends SIGTERM to
//     every process below it and SIGKILL after the grace, and exits only
//     once none is left, so the orchestrator's Wait returns when the whole
//     tree is gone;
//   - when its standard output or error is a pipe, gives the command pipes
//     of its own and copies them: when the orchestrator dies, it keeps
//     reading (and discards), so a command's SIGTERM handler can still
//     write its last line instead of dying of SIGPIPE. While the
//     orchestrator lives, a reader that went away is passed on: the command
//     gets SIGPIPE as it would without the guard;
//   - starts the command with PR_SET_PDEATHSIG SIGKILL, so the command dies
//     if the guard itself is SIGKILLed;
//   - exits with the command's status: its exit code, or death by the same
//     signal for SIGKILL, SIGTERM, SIGINT and SIGHUP (128+N for another
//     signal N).
//
// SIGINT, SIGHUP and SIGQUIT sent to the guard are not forwarded: they come
// to the command's whole process group, and the command has its own copy.
// SIGINT and SIGHUP that the orchestrator ignores stay ignored, for the
// guard and the command.
package guard

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/proctree"
)

// flag is the guard's first argument: the executable runs as a guard when
// it sees it (Init). Its arguments then are the grace, the command's path
// and its argv.
const flag = "-watchdog-guard-v1"

// lifeFD is where the guard finds the life pipe's read end (ExtraFiles[0]).
const lifeFD = 3

// Margin is how much longer than the grace the orchestrator waits for the
// guard (exec.Cmd.WaitDelay): the guard SIGKILLs the tree at the grace, and
// reaps it within this margin.
const Margin = 2 * time.Second

// pipeRelayWait is how long a copy of the command's output waits, after its
// reader went away, to learn whether the orchestrator died with it (the
// orchestrator's pipes close together, in one exit).
const pipeRelayWait = 100 * time.Millisecond

var (
	enabled  atomic.Bool
	lifeOnce sync.Once
	lifeR    *os.File
	lifeW    *os.File // never closed: it closes when this process ends
	lifeErr  error
)

// Init runs the guard and exits if this process was started as one;
// otherwise it turns the guard on for Command (see reexec.Init).
func Init() {
	if len(os.Args) > 1 && os.Args[1] == flag {
		os.Exit(Main(os.Args[2:]))
	}
	enabled.Store(true)
}

// Enabled reports whether Init was called (and this is not a guard).
func Enabled() bool { return enabled.Load() }

// Wrap makes cmd, fresh from exec.Command, run through a guard when Init
// was called: cmd.Path becomes this executable and cmd.Args
// [exe, flag, grace, path, argv...]. It reports whether it did.
func Wrap(cmd *exec.Cmd, grace time.Duration) bool {
	if !enabled.Load() || cmd.Err != nil {
		return false
	}
	self, err := os.Executable()
	if err != nil {
		return false
	}
	lifeOnce.Do(func() { lifeR, lifeW, lifeErr = os.Pipe() })
	if lifeErr != nil {
		return false
	}
	cmd.Args = append([]string{self, flag, grace.String(), cmd.Path}, cmd.Args...)
	cmd.Path = self
	cmd.ExtraFiles = []*os.File{lifeR}
	return true
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// Main is the guard's program: args are the grace, the command's path and
// its argv. It returns the guard's exit code.
func Main(args []string) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE)
	for _, s := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if !signal.Ignored(s) { // an inherited ignore stays, for the command too
			signal.Notify(sigs, s)
		}
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "watchdog guard: no command")
		return 125
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil || grace <= 0 {
		grace = 5 * time.Second
	}
	path, argv := args[1], args[2:]
	passed := inherited() // the caller's ExtraFiles, after the life pipe
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)

	orchestratorGone := make(chan struct{})
	go func() {
		life := os.NewFile(lifeFD, "watchdog-life")
		_, _ = io.Copy(io.Discard, life)
		close(orchestratorGone)
	}()
	files := []uintptr{0, 1, 2}
	var relays sync.WaitGroup
	var ends []*os.File
	relay := func(fd int) {
		r, w, err := os.Pipe()
		if err != nil {
			return
		}
		files[fd] = w.Fd()
		ends = append(ends, w)
		relays.Add(1)
		go func() {
			defer relays.Done()
			copyOut(os.NewFile(uintptr(fd), "out"), r, orchestratorGone)
		}()
	}
	ino1, pipe1 := isPipe(1)
	if pipe1 {
		relay(1)
	}
	if ino2, pipe2 := isPipe(2); pipe2 && pipe1 && ino2 == ino1 {
		files[2] = files[1] // 2>&1: one pipe keeps the order
	} else if pipe2 {
		relay(2)
	}
	files = append(files, passed...)
	select {
	case <-orchestratorGone:
		return 125 // the orchestrator died before the command started
	default:
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	for _, w := range ends {
		_ = w.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "watchdog guard: %s: %v\n", path, err)
		if err == syscall.ENOENT {
			return 127
		}
		return 126
	}

	// Reap every child, the command's reparented descendants included.
	cmdDone := make(chan syscall.WaitStatus, 1)
	allGone := make(chan struct{})
	go func() {
		defer close(allGone)
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
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

	self := os.Getpid()
	var killAt, giveUp <-chan time.Time
	terminate := func() {
		if killAt != nil || giveUp != nil {
			return
		}
		for _, p := range proctree.Tree(-1, self) {
			_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		}
		killAt = time.After(grace)
	}
	var status syscall.WaitStatus
	ended := false
	gone := orchestratorGone // nil once seen
	for done := false; !done; {
		select {
		case status = <-cmdDone:
			ended, cmdDone = true, nil
			terminate() // what the command left running below it
		case <-gone:
			gone = nil
			terminate()
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				terminate()
			}
		case <-killAt:
			killAt = nil
			for _, p := range proctree.Tree(-1, self) {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			giveUp = time.After(Margin / 2)
		case <-giveUp:
			done = true
		case <-allGone:
			done = true
		}
	}
	if !ended {
		select {
		case status = <-cmdDone:
			ended = true
		default:
		}
	}
	waitRelays(&relays, grace)
	if !ended {
		return 125
	}
	return exitAs(status)
}

// copyOut copies the command's output from r to out. When out's reader is
// gone, it discards the rest if the orchestrator died (gone closes), and
// otherwise closes r, so the command gets SIGPIPE as it would without the
// guard.
func copyOut(out, r *os.File, gone <-chan struct{}) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	discard := false
	for {
		n, err := r.Read(buf)
		if n > 0 && !discard {
			if _, werr := out.Write(buf[:n]); werr != nil {
				t := time.NewTimer(pipeRelayWait)
				select {
				case <-gone:
					discard = true
				case <-t.C:
					return
				}
				t.Stop()
			}
		}
		if err != nil {
			return
		}
	}
}

// waitRelays waits for the copies of the output to end (every writer gone),
// at most d: a process that escaped the tree may hold a pipe.
func waitRelays(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// exitAs returns the command's exit code, or dies of the command's signal
// for SIGKILL, SIGTERM, SIGINT and SIGHUP (the Go runtime's default for
// these is death by the signal), so the orchestrator sees what killed it.
func exitAs(ws syscall.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	switch sig := ws.Signal(); sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP:
		if signal.Ignored(sig) {
			break
		}
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // the signal is on its way; an ignored one falls through
	}
	return 128 + int(ws.Signal())
}

// isPipe reports whether fd is a pipe, and its inode.
func isPipe(fd int) (uint64, bool) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return 0, false
	}
	return st.Ino, st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// inherited lists the open descriptors after the life pipe that this
// process inherited (not close-on-exec: the Go runtime's own are), in
// order: the orchestrator's exec.Cmd.ExtraFiles, passed on to the command
// from descriptor 3. A gap is passed on closed.
func inherited() []uintptr {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	open := map[int]bool{}
	top := 0
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= lifeFD {
			continue
		}
		flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if e != 0 || flags&syscall.FD_CLOEXEC != 0 {
			continue
		}
		open[fd] = true
		top = max(top, fd)
	}
	var out []uintptr
	for fd := lifeFD + 1; fd <= top; fd++ {
		if open[fd] {
			out = append(out, uintptr(fd))
		} else {
			out = append(out, ^uintptr(0)) // closed
		}
	}
	return out
}
