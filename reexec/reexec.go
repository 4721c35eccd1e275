// Package reexec makes watchdog.Command's kill reach every process a
// command started, even when the orchestrator process itself is SIGKILLed
// or OOM-killed, on Linux: one line, first in main.
//
//	func main() {
//		reexec.Init()
//		...
//	}
//
// After Init, watchdog.Command runs each command under a guard: a small
// process of the orchestrator's own executable (re-executed with a flag
// only the guard reads, as moby's reexec does), which starts the command
// and stays its parent. The guard is a child subreaper, so every process
// the command starts stays below it, in whatever process group or session;
// when the orchestrator dies, however, the guard sends SIGTERM to all of
// them and SIGKILL after Command's grace; when Command's kill comes, it
// does the same and exits only once none is left. The command's first
// signal is SIGTERM, and its SIGTERM handler can still write to its
// output pipes after the orchestrator is gone (the guard keeps reading
// them). sessionwatchdog run uses the same guard.
//
// What changes for a caller of watchdog.Command: cmd.Process is the guard,
// not the command (its pid leads the command's process group; signal the
// group, syscall.Kill(-pid, sig), to reach the command); cmd.Path is this
// executable and cmd.Args starts with it, the flag, the grace and the
// command's path, then the command's argv; cmd.ProcessState is the guard's,
// which exits with the command's exit code, or dies of the same signal for
// SIGKILL, SIGTERM, SIGINT and SIGHUP (exits 128+N for another signal N).
// Append to cmd.ExtraFiles rather than replacing it: its first file is the
// guard's. Set Stdin, Stdout, Stderr, Env and Dir as usual.
//
// Outside Linux Init does nothing, and Command starts commands directly.
package reexec

import "github.com/sessionwatchdog/watchdog/internal/guard"

// Init turns the guard on for watchdog.Command; in a process started as a
// guard, it runs the guard instead and exits with the command's status,
// never returning. Call it first in main, before anything else starts
// (flag parsing included: the guard's arguments are its own). Calling it
// more than once is harmless; it is safe for concurrent use. A program
// that never calls it keeps Command's behaviour without a guard.
func Init() { guard.Init() }
