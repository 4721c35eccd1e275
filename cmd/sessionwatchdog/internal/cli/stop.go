package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

// Exit codes of "sessionwatchdog stop" beside ExitOK and ExitUsage.
const (
	// ExitNotStopped: nothing was stopped: no fleet member opened the
	// session, or its latest window had already ended (the output says how).
	ExitNotStopped = 3
	// ExitStopPending: the owner did not answer within --wait (its lease
	// may have expired: the request waits for a member that adopts the
	// window, which then stops it). The request stays.
	ExitStopPending = 4
)

const stopUsage = `Usage: sessionwatchdog stop --why TEXT --dsn DSN [--table TABLE] [--wait D] SESSION

Asks the owner of SESSION's open window, wherever it runs in the fleet, to
stop it: the owner records a stop (reason stop_requested) that names who
asked, the PostgreSQL role this command connected as (never a name given on
the command line), and why; the session's context ends as with
Session.StopBy, and "sessionwatchdog run" exits with 119. Two operators
stopping one session record one stop: the second is told it had ended.
When the owner is gone (its lease expired), the request waits for a fleet
member that adopts the window (WithAdoption), which then stops it.

The role needs INSERT (aggregate_id, why) and SELECT on the stops table
and SELECT on the events, windows and leases tables: see docs/stopping.md.
Remote stop needs PostgreSQL: a JSON Lines log has one writer, the process
that runs the session; stop that one with a signal (run: SIGTERM, exit 143).

Exit codes:
  0  the owner stopped the session
  2  usage error, or the database refused or could not be reached
  3  nothing stopped: no fleet member opened the session, or its window had
     already ended (the output says how)
  4  no answer within --wait; the request stays and is carried out when the
     owner, or the member that adopts its window, reads it

Flags:
%s
Example:
  sessionwatchdog stop --dsn "host=/run/postgresql dbname=app user=alice" \
      --why "runaway: 400 tool calls, no progress" agent-42
`

func runStop(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessionwatchdog stop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		why, dsn, table, logPath string
		wait                     time.Duration
	)
	fs.StringVar(&why, "why", "", "why the session is stopped (1 to 1,024 bytes), recorded on its stop event")
	fs.StringVar(&dsn, "dsn", "", "the fleet's PostgreSQL `DSN`; the role it connects as is recorded as who asked")
	fs.StringVar(&table, "table", postgres.DefaultTable, "the events `table` of the fleet")
	fs.DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the owner's answer (0: do not wait)")
	fs.StringVar(&logPath, "log", "", "a JSON Lines log: refused (remote stop needs PostgreSQL)")
	pos, code, ok := parse(fs, args, stopUsage, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case logPath != "" || dsn == "":
		fmt.Fprintln(stderr, "sessionwatchdog stop: remote stop needs PostgreSQL (--dsn): a JSON Lines log has one writer, the process that runs the session, and no way to ask it; stop that process with a signal (sessionwatchdog run records SIGTERM as an operator's stop and exits 143)")
		return ExitUsage
	case len(pos) != 1:
		fmt.Fprintf(stderr, "sessionwatchdog stop: want one SESSION, got %d arguments\n", len(pos))
		return ExitUsage
	case why == "":
		fmt.Fprintln(stderr, "sessionwatchdog stop: --why is required: it is recorded on the stop event")
		return ExitUsage
	case wait < 0:
		fmt.Fprintln(stderr, "sessionwatchdog stop: --wait must not be negative")
		return ExitUsage
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog stop: --dsn: %v\n", err)
		return ExitUsage
	}
	defer pool.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := postgres.RequestStop(rctx, pool, pos[0], why, postgres.WithTable(table))
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog stop: %v\n", err)
		return ExitUsage
	}
	switch r.State {
	case postgres.StopUnknown:
		fmt.Fprintf(stdout, "session %q is unknown: %s; nothing to stop (request %d)\n", r.SessionID, r.Detail, r.ID)
		return ExitNotStopped
	case postgres.StopEnded:
		fmt.Fprintf(stdout, "session %q: %s; nothing to stop (request %d)\n", r.SessionID, r.Detail, r.ID)
		return ExitNotStopped
	}
	fmt.Fprintf(stdout, "stop requested: session %q window %d, owner %s, by %s (request %d)\n", r.SessionID, r.Window, r.Owner, r.RequestedBy, r.ID)
	if r.OwnerLeaseExpired {
		fmt.Fprintf(stdout, "the owner %s is gone (its lease expired): the request waits for a fleet member that adopts the window, which then stops it\n", r.Owner)
	}
	if wait == 0 {
		return ExitStopPending
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	a, err := postgres.WaitStop(wctx, pool, r.ID, postgres.WithTable(table))
	if err != nil && !a.Answered() {
		fmt.Fprintf(stdout, "no answer within %v: the request stays pending and is carried out when the window's owner (or the member that adopts it) reads it\n", wait)
		if wctx.Err() == nil {
			fmt.Fprintf(stderr, "sessionwatchdog stop: %v\n", err)
		}
		return ExitStopPending
	}
	took := a.AnsweredAt.Sub(a.RequestedAt).Round(time.Millisecond)
	switch a.State {
	case postgres.StopStopped:
		if a.AnsweredBy != r.Owner {
			fmt.Fprintf(stdout, "stopped: window %d, by %s, which adopted it from %s, %v after the request\n", a.Window, a.AnsweredBy, r.Owner, took)
		} else {
			fmt.Fprintf(stdout, "stopped: window %d, by its owner %s, %v after the request\n", a.Window, a.AnsweredBy, took)
		}
		return ExitOK
	case postgres.StopEnded:
		fmt.Fprintf(stdout, "not stopped: %s\n", a.Detail)
		return ExitNotStopped
	}
	fmt.Fprintf(stdout, "not stopped (%s): %s\n", a.State, a.Detail)
	return ExitNotStopped
}
