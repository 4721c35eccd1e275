// Package cli implements the sessionwatchdog command: its subcommands, flags, help
// texts and exit codes. Main is the whole program, minus os.Exit, so tests
// run it in-process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/flagx"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/inspect"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgsource"
	runcmd "github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/verify"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/whatif"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
	wi "github.com/sessionwatchdog/watchdog/whatif"
)

// Exit codes of the sessionwatchdog command.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitMismatch: the log was read, but a recorded verdict is wrong
	// (verify found a mismatch).
	ExitMismatch = 1
	// ExitUsage: bad flags or arguments, or an input that cannot be read
	// (missing file, corrupt line, unreachable database, missing table,
	// corrupt row), or an output that cannot be written.
	ExitUsage = 2
)

const usage = `sessionwatchdog: run a command under a watchdog, and read and check the event logs
the watchdog library records.

Usage:
  sessionwatchdog <command> [flags] [arguments]

Commands:
  run       run a command as a watched session: stopped at its wall clock, or
            when it shows no sign of work; exits with its exit code, or with
            one that says why it was stopped (sessionwatchdog help run)
  inspect   show each session's timeline: starts, resumes, verdicts with the
            channel that justified waiting, decisions, actions, outcomes, stops
  verify    re-derive every recorded verdict from the log (replay); exit 1 on
            a mismatch, for CI pipelines
  whatif    re-run the log under a candidate policy: the decisions that
            change, the windows stopped earlier, later or never, the likely
            false stops, and what the log cannot decide
  stop      ask the owner of a session, wherever it runs on PostgreSQL, to
            stop it, as the database role you connect as (help stop)
  top       list the session windows open now, refreshed: owner, budget, earliest
            stop and its rule, freshest evidence, calls in flight, last verdict
  version   print the command's version and the library's it was built with
  help      show help for a command: sessionwatchdog help inspect

An event log is JSON Lines: one event per line, as the watchdog file store
writes it. "-" reads standard input. With --dsn, the log is read from the
PostgreSQL table of the stores/postgres event store instead (read-only).

Exit codes:
  0  success
  1  a recorded verdict does not check out (mismatch)
  2  usage error, or an input that cannot be read (missing file, corrupt line,
     unreachable database, missing table, corrupt row)
  run exits with its command's code, or with one of its own that says why it
  stopped the command (sessionwatchdog help run)

Examples:
  sessionwatchdog inspect events.jsonl
  sessionwatchdog inspect --session agent-42 --kind verdict,decision events.jsonl
  sessionwatchdog inspect --html report.html events.jsonl
  sessionwatchdog inspect --dsn "host=/run/postgresql dbname=app" --table watchdog_events
  sessionwatchdog verify events.jsonl || echo "the log does not check out"
  sessionwatchdog whatif --policy candidate.json --checkpoints 5s events.jsonl
  sessionwatchdog top --dsn "host=/run/postgresql dbname=app"
`

const verifyUsage = `Usage: sessionwatchdog verify [flags] FILE.jsonl
       sessionwatchdog verify [flags] --dsn DSN [--table TABLE]

Re-derives every recorded verdict and decision from the inputs recorded with
it (the session's policy on its start or resume event, the evidence summary,
the window's and session's starts, the settle count), with the same pure
decision the watchdog uses, and checks that every outcome (cancel,
superseded, action_failed, attempt_cancelled) links a decision of its
session and that deadline and wait-timeout events fired at or after their
limit. This is watchdog.Replay. A log is self-consistent when nothing
mismatches: nobody edited a verdict, and the version that wrote it decided
as this one does.

FILE is a JSON Lines event log; "-" reads standard input. With --dsn the
events are read from PostgreSQL instead (see "sessionwatchdog help inspect"). Only
whole sessions can be selected: a verdict needs its session's start event.

Exit codes:
  0  every verdict checks out
  1  at least one mismatch (each is printed: seq, event, recorded, re-derived)
  2  usage error, or a log that cannot be read (missing file, corrupt line,
     unreachable database, missing table, corrupt row)

Flags (-flag or --flag, before or after FILE; "--" ends them):
%s
Examples:
  sessionwatchdog verify events.jsonl
  sessionwatchdog verify --session agent-42 events.jsonl
  sessionwatchdog verify --json events.jsonl | jq '.mismatches[]'
  PGPASSWORD=... sessionwatchdog verify --dsn "postgres://audit@db.internal/app"
`

const inspectUsage = `Usage: sessionwatchdog inspect [flags] FILE.jsonl
       sessionwatchdog inspect [flags] --dsn DSN [--table TABLE]

Shows, per session, a timeline of the recorded events: start, resumes, each
CONTINUE verdict with the channel that justified waiting (active_channel),
stale observations (settle_count of settle_checks), decisions (mode act or
shadow, rule, reason), outcomes (cancel and the decision it carried out,
superseded, action_failed), stops, and every other event kind with its
reason and fields. Under each verdict: the age of every channel's latest
evidence; "*" marks the active channel.

With --open it lists the windows that have no terminal event instead: the
owner that opened or last resumed each, when it opened, its deadline (the
wall clock from the window's start, or the session ceiling, as its recorded
policy says) and whether it is past, and, with --dsn, whether the owner's
lease in the fleet's leases table has expired (nobody watches the window
until a fleet member adopts it). With --dsn "now" is the database's clock.

FILE is a JSON Lines event log; "-" reads standard input. A line that is
not a valid event is an error naming the file and line (exit code 2).

With --dsn DSN (and no FILE) the events are read from PostgreSQL: the table
the stores/postgres event store writes (--table, default watchdog_events),
every session's events in seq order, or only the --session ones. The
command only reads: one read-only transaction, nothing created or changed.
DSN is a URL (postgres://user@host:5432/db) or key=value pairs (host=/tmp
dbname=app); the usual PG* variables apply, so keep a password in
PGPASSWORD or ~/.pgpass rather than on the command line. A row that is not
a valid event is an error naming the table and its seq (exit code 2).

Flags (-flag or --flag, before or after FILE; "--" ends them):
%s
Examples:
  sessionwatchdog inspect events.jsonl
  sessionwatchdog inspect --session agent-42 events.jsonl
  sessionwatchdog inspect --kind cancel --kind decision --since 2026-05-23T09:00:00Z events.jsonl
  cat events.jsonl | sessionwatchdog inspect --json - | jq '.sessions[].final'
  sessionwatchdog inspect --html report.html events.jsonl   # one self-contained page
  sessionwatchdog inspect --dsn "host=/run/postgresql dbname=app" --session agent-42
  sessionwatchdog inspect --open --dsn "host=/run/postgresql dbname=app"   # windows nobody decided
`

const whatifUsage = `Usage: sessionwatchdog whatif --policy FILE.json [flags] FILE.jsonl
       sessionwatchdog whatif --policy FILE.json [flags] --dsn DSN [--table TABLE]

Re-runs every session window of the log under a candidate policy, with the
same pure decision the watchdog uses (whatif.Run), and reports per
window and in total: the decisions that change, the windows the candidate
stops earlier, later or never than the recorded policy did, and the likely
false stops (the candidate stops a window that went on to record evidence or
to complete).

The candidate policy file is a policy in its JSON form, the knobs recorded
on start events: {"session_wall_clock_seconds": 3600,
"no_output_deadline_seconds": 20, "settle_checks": 2}. An unknown knob or an
invalid value is a usage error (exit code 2) naming it.

The wall clock and the session ceiling are decided from the recorded
instants. The evidence rules need the evidence: the log dates it by the
counters on every verdict, decision, cancel and evidence checkpoint
(WithCheckpoints). Where the log cannot tell when evidence arrived (between
two observations whose counters grew by more than one, or after a window's
last observation), a window is "undetermined" from the first instant the
answer depends on it, with the reason. The absence of a checkpoint also
proves the absence of evidence until one checkpoint interval before a
window's end: the interval the Watchdog records on its checkpoints, plus a
tenth for the pass's own time, or D with --checkpoints D (for a log whose
checkpoints do not record it: give WithCheckpoints' D, plus a margin on a
real clock). With WithCallRecords, the log holds every tool call's
interval: a call in flight defers the idle rule until it ends, as it does
live.

FILE is a JSON Lines event log; "-" reads standard input. With --dsn the
events are read from PostgreSQL instead (see "sessionwatchdog help inspect").

Exit codes:
  0  the report was written (whatever it says)
  2  usage error, a bad policy file, or a log that cannot be read

Flags (-flag or --flag, before or after FILE; "--" ends them):
%s
Examples:
  sessionwatchdog whatif --policy stricter.json events.jsonl
  sessionwatchdog whatif --policy stricter.json --checkpoints 5s --session agent-42 events.jsonl
  sessionwatchdog whatif --policy stricter.json --json events.jsonl | jq '.totals'
  sessionwatchdog whatif --policy stricter.json --html whatif.html --dsn "host=/run/postgresql dbname=app"
`

// Main runs the watchdog command with args (without the program name) and
// returns its exit code. Everything it writes to stdout and stderr passes
// through a termsafe.Writer: no byte read from an event log or a database
// reaches the terminal as a control sequence.
//
// The run command is the exception: its command's output passes through
// unchanged (see run.Main), and so does its help.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "run" {
		return runcmd.Main(args[1:], stdin, stdout, stderr)
	}
	out, errOut := termsafe.NewWriter(stdout), termsafe.NewWriter(stderr)
	code := dispatch(args, stdin, out, errOut)
	if err := out.Flush(); err != nil && code == ExitOK {
		code = ExitUsage
	}
	_ = errOut.Flush()
	return code
}

func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "inspect":
		return runInspect(rest, stdin, stdout, stderr)
	case "verify":
		return runVerify(rest, stdin, stdout, stderr)
	case "whatif":
		return runWhatIf(rest, stdin, stdout, stderr)
	case "stop":
		return runStop(rest, stdout, stderr)
	case "top":
		return runTop(rest, stdin, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, version())
		return ExitOK
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] == "inspect" {
			return runInspect([]string{"--help"}, stdin, stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "verify" {
			return runVerify([]string{"--help"}, stdin, stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "top" {
			return runTop([]string{"--help"}, stdin, stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "whatif" {
			return runWhatIf([]string{"--help"}, stdin, stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "stop" {
			return runStop([]string{"--help"}, stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "run" {
			return runcmd.Main([]string{"--help"}, stdin, stdout, stderr)
		}
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "sessionwatchdog help: unknown command %q\n", rest[0])
			return ExitUsage
		}
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "sessionwatchdog: unknown command %q\n\n%s", cmd, usage)
		return ExitUsage
	}
}

// timeFlag is an RFC 3339 instant.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339Nano)
}

func (f *timeFlag) Set(v string) error {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time such as 2026-05-23T09:00:00Z")
	}
	f.t = t
	return nil
}

func runInspect(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessionwatchdog inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sessions, kinds flagx.List
		since, until    timeFlag
		asJSON, open    bool
		htmlOut         string
	)
	fs.Var(&sessions, "session", "show only this session `id` (repeatable, or comma-separated)")
	fs.Var(&kinds, "kind", "show only this event `kind`: full (runtime.watchdog.cancel) or short (cancel);\nrepeatable, or comma-separated")
	fs.Var(&since, "since", "show only events that occurred at or after this RFC 3339 `time`")
	fs.Var(&until, "until", "show only events that occurred at or before this RFC 3339 `time`")
	fs.BoolVar(&asJSON, "json", false, "write the timelines as JSON to standard output")
	fs.StringVar(&htmlOut, "html", "", "write one self-contained HTML page with a chart per session to this `file`")
	fs.BoolVar(&open, "open", false, "list the windows with no terminal event instead: their owner, deadline, whether it is past,\nand (with --dsn) whether their owner's lease has expired")
	var src source
	src.register(fs)
	pos, code, ok := parse(fs, args, inspectUsage, stdout, stderr)
	if !ok {
		return code
	}
	if !src.check("inspect", pos, stderr) {
		return ExitUsage
	}
	if asJSON && htmlOut != "" {
		fmt.Fprintln(stderr, "sessionwatchdog inspect: --json and --html are exclusive: pick one output")
		return ExitUsage
	}
	if !since.t.IsZero() && !until.t.IsZero() && until.t.Before(since.t) {
		fmt.Fprintf(stderr, "sessionwatchdog inspect: --until %s is before --since %s\n", until.String(), since.String())
		return ExitUsage
	}
	events, name, err := src.read(pos, sessions, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog inspect: %v\n", err)
		return ExitUsage
	}
	if open {
		return writeOpen(&src, events, sessions, asJSON, htmlOut != "", stdout, stderr)
	}
	report := inspect.Build(events, inspect.Filter{Sessions: sessions, Kinds: kinds, Since: since.t, Until: until.t})
	switch {
	case htmlOut != "":
		if err := writeHTML(htmlOut, report, name); err != nil {
			fmt.Fprintf(stderr, "sessionwatchdog inspect: %v\n", err)
			return ExitUsage
		}
		fmt.Fprintf(stderr, "wrote %s (%d sessions)\n", htmlOut, len(report.Sessions))
	case asJSON:
		err = inspect.WriteJSON(stdout, report)
	default:
		err = inspect.WriteText(stdout, report)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog inspect: write output: %v\n", err)
		return ExitUsage
	}
	return ExitOK
}

// writeOpen is inspect --open: the open windows, judged now (the
// database's clock with --dsn), with the owners' leases from PostgreSQL.
func writeOpen(src *source, events []watchdog.Event, sessions []string, asJSON, html bool, stdout, stderr io.Writer) int {
	if html {
		fmt.Fprintln(stderr, "sessionwatchdog inspect: --open writes text or --json, not --html")
		return ExitUsage
	}
	now := time.Now()
	var leases map[string]inspect.Lease
	if src.dsn != "" {
		ls, dbNow, err := pgsource.Leases(context.Background(), src.dsn, src.table)
		if err != nil {
			fmt.Fprintf(stderr, "sessionwatchdog inspect: %v\n", err)
			return ExitUsage
		}
		now, leases = dbNow, make(map[string]inspect.Lease, len(ls))
		for owner, l := range ls {
			leases[owner] = inspect.Lease{ExpiresAt: l.ExpiresAt, LastSeen: l.LastSeen}
		}
	}
	r := inspect.OpenWindows(events, now, leases, inspect.Filter{Sessions: sessions})
	var err error
	if asJSON {
		err = inspect.WriteOpenJSON(stdout, r)
	} else {
		err = inspect.WriteOpenText(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog inspect: write output: %v\n", err)
		return ExitUsage
	}
	return ExitOK
}

func runVerify(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessionwatchdog verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sessions flagx.List
		asJSON   bool
	)
	fs.Var(&sessions, "session", "verify only this session `id` (repeatable, or comma-separated)")
	fs.BoolVar(&asJSON, "json", false, "write the result as JSON to standard output")
	var src source
	src.register(fs)
	pos, code, ok := parse(fs, args, verifyUsage, stdout, stderr)
	if !ok {
		return code
	}
	if !src.check("verify", pos, stderr) {
		return ExitUsage
	}
	events, name, err := src.read(pos, sessions, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog verify: %v\n", err)
		return ExitUsage
	}
	if name == "-" {
		name = "<stdin>"
	}
	res, err := verify.Run(name, events, sessions, watchdog.Replay)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog verify: %v\n", err)
		return ExitUsage
	}
	if asJSON {
		err = verify.WriteJSON(stdout, res)
	} else {
		err = verify.WriteText(stdout, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog verify: write output: %v\n", err)
		return ExitUsage
	}
	if !res.OK() {
		return ExitMismatch
	}
	return ExitOK
}

func runWhatIf(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessionwatchdog whatif", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sessions         flagx.List
		asJSON           bool
		htmlOut, polPath string
		checkpointsEvery time.Duration
	)
	fs.StringVar(&polPath, "policy", "", "the candidate policy: a JSON `file` of the policy's knobs (required)")
	fs.DurationVar(&checkpointsEvery, "checkpoints", 0, "the log's WithCheckpoints `interval` (5s): no checkpoint proves no evidence\nuntil this long before a window's end (default: the interval recorded\non the log's checkpoints, plus a tenth)")
	fs.Var(&sessions, "session", "re-run only this session `id` (repeatable, or comma-separated)")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON to standard output")
	fs.StringVar(&htmlOut, "html", "", "write the report as one self-contained HTML page to this `file`")
	var src source
	src.register(fs)
	pos, code, ok := parse(fs, args, whatifUsage, stdout, stderr)
	if !ok {
		return code
	}
	if polPath == "" {
		fmt.Fprintln(stderr, "sessionwatchdog whatif: --policy is required: the candidate policy's JSON file")
		fmt.Fprintln(stderr, "run 'sessionwatchdog help whatif' for usage")
		return ExitUsage
	}
	if !src.check("whatif", pos, stderr) {
		return ExitUsage
	}
	if asJSON && htmlOut != "" {
		fmt.Fprintln(stderr, "sessionwatchdog whatif: --json and --html are exclusive: pick one output")
		return ExitUsage
	}
	if checkpointsEvery < 0 {
		fmt.Fprintf(stderr, "sessionwatchdog whatif: --checkpoints %v is negative\n", checkpointsEvery)
		return ExitUsage
	}
	candidate, err := readPolicy(polPath)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog whatif: --policy %s: %v\n", termsafe.String(polPath), err)
		return ExitUsage
	}
	events, name, err := src.read(pos, sessions, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog whatif: %v\n", err)
		return ExitUsage
	}
	if name == "-" {
		name = "<stdin>"
	}
	report, err := wi.Run(whatif.Filter(events, sessions), candidate, checkpointsEvery)
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog whatif: %v\n", err)
		return ExitUsage
	}
	switch {
	case htmlOut != "":
		err = writeFile(htmlOut, func(w io.Writer) error { return whatif.WriteHTML(w, report, name) })
		if err == nil {
			fmt.Fprintf(stderr, "wrote %s (%d windows)\n", htmlOut, len(report.Windows))
		}
	case asJSON:
		err = whatif.WriteJSON(stdout, report)
	default:
		err = whatif.WriteText(stdout, report, name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sessionwatchdog whatif: write output: %v\n", err)
		return ExitUsage
	}
	return ExitOK
}

// readPolicy reads and validates a policy's JSON file.
func readPolicy(path string) (watchdog.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return watchdog.Policy{}, err
	}
	var p watchdog.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return watchdog.Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return watchdog.Policy{}, err
	}
	return p, nil
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// source is where a command reads its events: a JSON Lines file (the
// positional argument) or, with --dsn, a PostgreSQL table.
type source struct {
	dsn, table string
	tableSet   bool
}

func (s *source) register(fs *flag.FlagSet) {
	s.table = postgres.DefaultTable
	fs.StringVar(&s.dsn, "dsn", "", "read the events from PostgreSQL at this `DSN` (URL or key=value pairs) instead of a file")
	fs.Func("table", "with --dsn: the events `table` of the PostgreSQL store, [schema.]name (default "+postgres.DefaultTable+")", func(v string) error {
		s.table, s.tableSet = v, true
		return nil
	})
}

// check reports whether the positional arguments fit the source, printing
// the problem to stderr if not.
func (s *source) check(cmd string, pos []string, stderr io.Writer) bool {
	switch {
	case s.dsn != "" && len(pos) > 0:
		fmt.Fprintf(stderr, "sessionwatchdog %s: --dsn reads the events from PostgreSQL: give no event log file too (got %q)\n", cmd, pos[0])
	case s.dsn == "" && s.tableSet:
		fmt.Fprintf(stderr, "sessionwatchdog %s: --table needs --dsn (it names a PostgreSQL table)\n", cmd)
	case s.dsn == "" && len(pos) != 1:
		fmt.Fprintf(stderr, "sessionwatchdog %s: want exactly one event log (FILE.jsonl or -), or --dsn; got %d arguments\n", cmd, len(pos))
	default:
		return true
	}
	fmt.Fprintf(stderr, "run 'sessionwatchdog help %s' for usage\n", cmd)
	return false
}

// read returns the events and a name for the source (the file, or
// "postgres:TABLE", never the DSN, which may hold a password). With --dsn,
// only the sessions listed are read when there are any.
func (s *source) read(pos, sessions []string, stdin io.Reader) ([]watchdog.Event, string, error) {
	if s.dsn == "" {
		events, err := eventlog.ReadFile(pos[0], stdin)
		return events, pos[0], err
	}
	name := "postgres:" + s.table
	events, err := pgsource.Read(context.Background(), s.dsn, s.table, sessions)
	return events, name, err
}

func writeHTML(path string, r inspect.Report, source string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := inspect.WriteHTML(f, r, source); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// parse parses flags that may appear before, between or after the
// positional arguments; a lone "--" ends the flags. It returns ok=false with
// the exit code when the command must stop: ExitOK after --help (the usage
// goes to stdout), ExitUsage on a bad flag (the flag package has named it).
func parse(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	fs.Usage = func() {} // the flag package's error is enough; help on request
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				var b strings.Builder
				fs.SetOutput(&b)
				fs.PrintDefaults()
				fmt.Fprintf(stdout, help, b.String())
				return nil, ExitOK, false
			}
			fmt.Fprintf(stderr, "run 'sessionwatchdog help %s' for usage\n", strings.TrimPrefix(fs.Name(), "sessionwatchdog "))
			return nil, ExitUsage, false
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, true
		}
		if len(rest) == 0 {
			return pos, 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// version is the command's module version and the library's, from the
// build information: "v0.1.0" once installed with go install ...@v0.1.0,
// "(devel)" when built from a checkout.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "sessionwatchdog (unknown version)"
	}
	lib := "(devel)"
	for _, d := range bi.Deps {
		if d.Path == "github.com/sessionwatchdog/watchdog" {
			lib = d.Version
			if d.Replace != nil {
				lib = "(devel, " + d.Replace.Path + ")"
			}
		}
	}
	return fmt.Sprintf("sessionwatchdog %s, library %s, %s", bi.Main.Version, lib, bi.GoVersion)
}
