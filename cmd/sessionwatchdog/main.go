// Command sessionwatchdog runs any command as a watched session, and reads
// the event logs that the watchdog library records: why each session
// stopped, whether the log replays, what another policy would have done.
//
//	sessionwatchdog run --idle 5m --wall 1h -- ./agent.sh  # its exit code says why it stopped
//	sessionwatchdog inspect events.jsonl                  # a timeline per session
//	sessionwatchdog inspect --json events.jsonl           # the same, for machines
//	sessionwatchdog inspect --html report.html events.jsonl
//	sessionwatchdog verify events.jsonl                   # replay: exit 1 on a mismatch
//	sessionwatchdog whatif --policy stricter.json events.jsonl
//	sessionwatchdog inspect --dsn "$DATABASE_URL"          # the PostgreSQL store's table
//
// Run "sessionwatchdog help" for the commands, flags and exit codes.
package main

import (
	"os"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/cli"
	"github.com/sessionwatchdog/watchdog/reexec"
)

func main() {
	reexec.Init() // run's guard: see docs/run.md
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
