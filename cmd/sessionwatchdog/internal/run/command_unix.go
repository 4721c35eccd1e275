//go:build unix

package run

import (
	"context"
	"os/exec"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// command returns the exec.Cmd that runs path with argv (argv[0] as the
// user wrote it) under watchdog.Command's kill of ctx. On Linux the
// sessionwatchdog command calls reexec.Init first, so the command runs
// under the guard (see package reexec and docs/run.md): it dies with its
// whole tree even when the wrapper is SIGKILLed. Command records the kill
// under the base name of path: the command's.
func command(ctx context.Context, grace time.Duration, path string, argv []string) (*exec.Cmd, error) {
	cmd := watchdog.Command(ctx, grace, path, argv[1:]...)
	cmd.Args[len(cmd.Args)-len(argv)] = argv[0]
	return cmd, nil
}
