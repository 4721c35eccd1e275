//go:build unix

package watchdog

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Command returns an exec.Cmd for name and args that the host really kills
// when ctx ends (a handler's deadline, the session's cancel): the command runs
// in its own process group; on cancellation the whole group gets SIGTERM, and
// SIGKILL after grace (5 s if grace <= 0), so no child of the
// command lingers. cmd.Wait returns at most grace after the cancellation even
// if a child keeps the output pipes open (exec.Cmd.WaitDelay). The grace
// runs on the real clock: it is about real processes. Do not replace the
// returned command's SysProcAttr, Cancel or WaitDelay.
func Command(ctx context.Context, grace time.Duration, name string, arg ...string) *exec.Cmd {
	if grace <= 0 {
		grace = defaultHandlerGrace
	}
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		err := syscall.Kill(-pgid, syscall.SIGTERM)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		time.AfterFunc(grace, func() {
			// Only if the group is still there: a group id is its
			// leader's pid, which the kernel does not hand out again
			// while the group has a member.
			if syscall.Kill(-pgid, 0) == nil {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		})
		return err
	}
	cmd.WaitDelay = grace
	return cmd
}
