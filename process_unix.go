//go:build unix

package watchdog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/guard"
	"github.com/sessionwatchdog/watchdog/internal/kills"
	"github.com/sessionwatchdog/watchdog/internal/proctree"
)

// Command returns an exec.Cmd for name and args that the host really kills
// when ctx ends (a handler's deadline, the session's cancel). The command
// runs in its own process group. On cancellation the whole group, and on
// Linux every process below the command in the process tree (one that left
// the group with setsid included), gets SIGTERM, then SIGKILL if it is
// still alive after grace (5 s if grace <= 0). cmd.Wait returns at most
// grace after the cancellation even if a child keeps the output pipes open
// (exec.Cmd.WaitDelay). The grace runs on the real clock: it is about real
// processes. Do not replace the returned command's Path, Args,
// SysProcAttr, Cancel or WaitDelay, and append to ExtraFiles rather than
// replacing it.
//
// When ctx belongs to a watched session, the outcome of a kill is recorded
// at the end of the grace, or by Watchdog.Close once every process is gone,
// as a runtime.handler.process_killed event:
// handler is the command's base name, reason "sigterm" when every process
// was gone within the grace or "sigkill" when some had to be killed,
// processes_alive how many were still alive, limit_seconds the grace.
//
// On Linux, when main calls reexec.Init first, the command runs under a
// guard (see package reexec): cmd.Process is then the guard, which leads
// the group, starts the command, and kills every process of its tree when
// the orchestrator dies (SIGKILL and OOM included) or when ctx ends;
// cmd.Wait then returns once the whole tree is gone (at most grace + 2 s
// after the cancellation). Without it, the kernel SIGKILLs the command if
// the orchestrator dies (the parent-death signal, tied to the OS thread
// that calls Start: do not call Start from a goroutine locked to its
// thread that may return without unlocking), but not its own children:
// those that do not die with their parent live on. Outside Linux a command
// outlives an orchestrator that is killed.
func Command(ctx context.Context, grace time.Duration, name string, arg ...string) *exec.Cmd {
	if ctx == nil {
		cmd := exec.Command(name, arg...) //watchdog:unbounded never started: cmd.Err refuses it
		cmd.Err = fmt.Errorf("%w: Command %q: nil context", ErrInvalidArgument, name)
		return cmd
	}
	if grace <= 0 {
		grace = defaultHandlerGrace
	}
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = grace
	if guard.Wrap(cmd, grace) {
		cmd.WaitDelay += guard.Margin // the guard kills the tree at the grace
	} else {
		proctree.SetParentDeath(cmd.SysProcAttr)
	}
	cmd.Cancel = func() error { return killCommand(ctx, cmd.Process.Pid, grace, filepath.Base(name)) }
	return cmd
}

// killCommand is Command's kill of the command whose process group is pgid:
// SIGTERM to the group and to every process below its leader, then, after
// grace, SIGKILL to those still alive and the record of the outcome. Close
// waits for it (trackKill).
func killCommand(ctx context.Context, pgid int, grace time.Duration, name string) error {
	procs := proctree.Tree(pgid, pgid)               // before signalling: later they may be reparented
	kill := trackKill(ctx, name, grace, pgid, procs) // before signalling: a Close after it waits for it
	err := syscall.Kill(-pgid, syscall.SIGTERM)
	for _, p := range procs {
		if p.Alive() {
			_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		}
	}
	if errors.Is(err, syscall.ESRCH) && len(procs) == 0 {
		if kill.Claim() {
			kill.Done() // nothing was killed: nothing to record
		}
		return os.ErrProcessDone
	}
	kill.Arm()
	kill.SetTimer(time.AfterFunc(grace, func() {
		if !kill.Claim() {
			return // Close saw the tree gone and recorded the kill
		}
		defer kill.Done()
		// The processes still alive: those found before, and any the
		// group or the tree gained since.
		left := map[proctree.Proc]bool{}
		for _, p := range append(procs, proctree.Tree(pgid, pgid)...) {
			if p.Alive() {
				left[p] = true
			}
		}
		// The tree first, the group's leader last: once a guard (the
		// leader) is gone, the orchestrator's Wait returns.
		for p := range left {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		// Only if the group is still there: a group id is its leader's
		// pid, which the kernel does not hand out again while the group
		// has a member.
		groupLeft := syscall.Kill(-pgid, 0) == nil
		if groupLeft {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		alive := len(left)
		if alive == 0 && groupLeft {
			alive = 1 // outside Linux the group's members are not listed
		}
		if s := FromContext(ctx); s != nil {
			s.recordProcessKill(name, grace, alive)
		}
	}))
	if errors.Is(err, syscall.ESRCH) {
		err = nil // the group's leader is gone; its tree was signalled
	}
	return err
}

// trackKill tracks the kill of group pgid in its grace when ctx belongs to
// a session, so that Close waits for its tree to be gone and records it
// (see Watchdog.Close); nil otherwise.
func trackKill(ctx context.Context, name string, grace time.Duration, pgid int, procs []proctree.Proc) *kills.Kill {
	s := FromContext(ctx)
	if s == nil {
		return nil
	}
	return s.w.kills.Add(fmt.Sprintf("the kill of %s (process group %d)", quoteShort(name), pgid),
		func() bool { return proctree.Gone(pgid, procs) },
		func() { s.recordProcessKill(name, grace, 0) })
}

// recordProcessKill records the outcome of Command's kill (see Command).
func (s *Session) recordProcessKill(name string, grace time.Duration, alive int) {
	w := s.w
	e := s.event(KindProcessKilled, w.now())
	e.Handler, e.Reason, e.LimitSeconds, e.ProcessesAlive = cleanText(name), "sigterm", grace.Seconds(), alive
	if alive > 0 {
		e.Reason = "sigkill"
	}
	w.record(nil, e)
}
