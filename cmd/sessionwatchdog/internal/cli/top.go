package cli

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/flagx"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgsource"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/top"
	"github.com/sessionwatchdog/watchdog/live"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

const topUsage = `Usage: sessionwatchdog top [flags] --log FILE.jsonl
       sessionwatchdog top [flags] --dsn DSN [--table TABLE]

Lists the session windows open now, refreshed every --interval: per window,
its session and window number, its owner (host-pid-random by default, or the
name its Watchdog was given with WithEventIDPrefix; "(lease expired)" when
nobody renews it), its elapsed time and wall-clock budget, when and by which
rule it stops at the earliest unless evidence or a call defers it, its
freshest evidence channel and that evidence's age, its calls in flight (and
the oldest one's name), its last verdict, and how old the row's facts are
(FACTS AGE: since its owner's latest checkpoint, verdict or opening). Rows
are sorted by their earliest stop.

Each refresh prints a header line, a table and a blank line: plain lines, no
screen control, so it works without a terminal, into a file or a pager, at
any width (cells longer than 32 runes are cut in the middle unless --wide).
With --json, each refresh is one JSON document on one line instead (the
live package's List). Values read from the log or the database are escaped
for the terminal, as inspect does.

With --log (or FILE), the event log is a JSON Lines file, as "run" and the
file store write it; it is read whole at each refresh (a line being written
is left for the next), and the list is judged on this host's clock. The
freshest evidence, calls in flight and earliest stop come from the owner's
checkpoint events (WithCheckpoints; "run --checkpoints") and verdicts.

With --dsn DSN the list is read from a PostgreSQL fleet's windows table
(stores/postgres ReadLive) in one read-only transaction per refresh, judged
on the database's clock; the owners' heartbeats keep each open window's
checkpoint there every 2 s (every third of their lease).

Flags (-flag or --flag; "--" ends them):
%s
Exit codes:
  0  every refresh asked for was printed (or interrupted by a signal)
  2  usage error, or an input that cannot be read

Examples:
  sessionwatchdog top --log events.jsonl
  sessionwatchdog top --dsn "host=/run/postgresql dbname=app" --owner build7-4242-1a2b3c4d
  sessionwatchdog top --dsn "$DSN" --json --count 1 | jq '.sessions[] | select(.calls_in_flight > 0)'
`

func runTop(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessionwatchdog top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sessions flagx.List
		owner    string
		logPath  string
		asJSON   bool
		wide     bool
		interval time.Duration
		count    int
	)
	fs.StringVar(&logPath, "log", "", "the event log `file` (JSON Lines) to list from; or give it as the argument")
	fs.StringVar(&owner, "owner", "", "list only the windows of this `owner`")
	fs.Var(&sessions, "session", "list only this session `id` (repeatable, or comma-separated)")
	fs.BoolVar(&asJSON, "json", false, "write each refresh as one JSON document on one line")
	fs.BoolVar(&wide, "wide", false, "print every cell whole (default: cut past 32 runes)")
	fs.DurationVar(&interval, "interval", 2*time.Second, "refresh every `interval`")
	fs.IntVar(&count, "count", 0, "stop after `n` refreshes (0: until interrupted)")
	var src source
	src.register(fs)
	pos, code, ok := parse(fs, args, topUsage, stdout, stderr)
	if !ok {
		return code
	}
	if logPath != "" {
		pos = append([]string{logPath}, pos...)
	}
	if !src.check("top", pos, stderr) {
		return ExitUsage
	}
	if pos := pos; len(pos) == 1 && pos[0] == "-" {
		fmt.Fprintln(stderr, "sessionwatchdog top: the log is read again at each refresh: give a file, not standard input")
		return ExitUsage
	}
	if interval < 10*time.Millisecond || count < 0 {
		fmt.Fprintf(stderr, "sessionwatchdog top: --interval %v (want 10ms or more) or --count %d (want 0 or more) out of range\n", interval, count)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f := live.Filter{Owner: owner, Sessions: sessions}
	var read func(context.Context) (live.List, error)
	name := ""
	if src.dsn == "" {
		name = pos[0]
		read = func(context.Context) (live.List, error) { return readLogLive(pos[0], f) }
	} else {
		name = "postgres:" + src.table
		conn, err := pgsource.Connect(ctx, src.dsn)
		if err != nil {
			fmt.Fprintf(stderr, "sessionwatchdog top: %v\n", err)
			return ExitUsage
		}
		defer conn.Close(context.WithoutCancel(ctx))
		read = func(ctx context.Context) (live.List, error) { return readPGLive(ctx, conn, src.table, f) }
	}
	for n := 1; ; n++ {
		l, err := read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ExitOK
			}
			fmt.Fprintf(stderr, "sessionwatchdog top: %v\n", err)
			return ExitUsage
		}
		bw := bufio.NewWriterSize(stdout, 64<<10) // one refresh, in few writes
		if asJSON {
			err = top.WriteJSON(bw, l)
		} else {
			err = top.WriteText(bw, l, top.Options{Wide: wide, Source: name})
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			fmt.Fprintf(stderr, "sessionwatchdog top: write output: %v\n", err)
			return ExitUsage
		}
		if n == count {
			return ExitOK
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ExitOK
		}
	}
}

// readLogLive lists the open windows of the JSON Lines log at path, judged
// now; a last line without its newline is being written and is left out.
func readLogLive(path string, f live.Filter) (live.List, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return live.List{}, err
	}
	now := time.Now()
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	events, err := eventlog.Read(bytes.NewReader(b), termsafe.String(path))
	if err != nil {
		return live.List{}, err
	}
	return live.FromEvents(events, now, nil, f), nil
}

// readPGLive lists the open windows of table's fleet in one read-only
// transaction on conn.
func readPGLive(ctx context.Context, conn *pgx.Conn, table string, f live.Filter) (live.List, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return live.List{}, fmt.Errorf("PostgreSQL: begin a read-only transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var found *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1)::text`, table+"_windows").Scan(&found); err != nil {
		return live.List{}, fmt.Errorf("PostgreSQL: look up the windows of table %s: %w", table, err)
	}
	if found == nil {
		return live.List{}, fmt.Errorf("PostgreSQL: table %s has no fleet beside it (no %s_windows table: no watchdog of a fleet version has recorded to it; is --table the name the store was given with WithTable?)", table, table)
	}
	l, err := postgres.ReadLive(ctx, tx, table, f)
	if err != nil {
		return live.List{}, err
	}
	return l, nil
}
