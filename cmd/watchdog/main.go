// Command watchdog reads the event logs that the watchdog library records
// and shows why each session stopped.
//
//	watchdog inspect events.jsonl                  # a timeline per session
//	watchdog inspect --json events.jsonl           # the same, for machines
//	watchdog inspect --html report.html events.jsonl
//	watchdog verify events.jsonl                   # replay: exit 1 on a mismatch
//	watchdog inspect --dsn "$DATABASE_URL"          # the PostgreSQL store's table
//
// Run "watchdog help" for the commands, flags and exit codes.
package main

import (
	"os"

	"github.com/sessionwatchdog/watchdog/cmd/watchdog/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
