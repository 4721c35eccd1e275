//go:build !unix

package run

import (
	"fmt"
	"io"
)

// Main runs "sessionwatchdog run": it needs a Unix system (the process
// group kill of watchdog.Command).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if _, code, ok := parseFlags(args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintln(stderr, "sessionwatchdog run: not supported on this system (it needs Unix process groups)")
	return ExitFailed
}
