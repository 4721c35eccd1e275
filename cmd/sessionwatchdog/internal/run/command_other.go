//go:build unix && !linux

package run

import (
	"context"
	"os/exec"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// IsGuard reports whether this process is the guard of a run: there is no
// guard outside Linux.
func IsGuard() bool { return false }

// GuardMain is the guard's program, on Linux only.
func GuardMain(args []string) int { return ExitFailed }

// command returns the exec.Cmd that runs path with argv under
// watchdog.Command's kill of ctx. Outside Linux there is no guard: CMD's
// tree outlives a wrapper that is killed (see docs/run.md).
func command(ctx context.Context, grace time.Duration, path string, argv []string) (*exec.Cmd, error) {
	cmd := watchdog.Command(ctx, grace, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	return cmd, nil
}
