package run

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/agentevents"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/flagx"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
)

// options are the parsed flags of one run.
type options struct {
	policy      watchdog.Policy
	policyFile  string
	session     string
	logPath     string
	dsn, table  string
	grace       time.Duration
	events      string
	parser      *agentevents.Parser
	postTurn    time.Duration
	callCap     time.Duration
	subagentCap time.Duration
	stdoutMode  string
	stderrMode  string
	checkpoints time.Duration
	operator    string
	progress    string
	command     []string
}

// Defaults of the flags that are not the policy's.
const (
	defaultGrace       = 5 * time.Second
	defaultCallCap     = 10 * time.Minute
	defaultSubagentCap = 30 * time.Minute
	defaultCheckpoints = time.Second
	defaultPostTurn    = 30 * time.Second
)

// stderrChannel is the evidence channel of CMD's standard error.
const stderrChannel = "stderr"

// durationFlag is a duration flag that refuses a negative value, naming it.
type durationFlag struct {
	d   *time.Duration
	off bool // "off" is accepted, as watchdog.Off
}

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	if f.off && *f.d == watchdog.Off {
		return "off"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	if f.off && v == "off" {
		*f.d = watchdog.Off
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s or 5m")
	}
	if d < 0 {
		return fmt.Errorf("negative duration")
	}
	*f.d = d
	return nil
}

// parseFlags parses args into options. It returns ok=false with the exit
// code when the command must stop: 0 after --help (the usage goes to
// stdout), ExitUsage on a bad flag (named on stderr).
func parseFlags(args []string, stdout, stderr io.Writer) (o options, code int, ok bool) {
	fs := flag.NewFlagSet("sessionwatchdog run", flag.ContinueOnError)
	fs.SetOutput(termsafe.NewWriter(stderr)) // the flag package's errors quote a flag's name raw
	fs.Usage = func() {}
	var (
		flagPolicy watchdog.Policy
		ignore     flagx.List
		workspace  string
		mode       string
		settle     int
		settleSet  bool
	)
	fs.Var(durationFlag{d: &flagPolicy.WallClock}, "wall", "the window's wall-clock `budget`: nothing extends it (default 4h, the library's)")
	fs.Var(durationFlag{d: &flagPolicy.IdleWindow}, "idle", "stdout silent for longer than this `duration`, with no fresher evidence elsewhere, is stale\n(default: off, no idle rule)")
	fs.Var(durationFlag{d: &flagPolicy.SessionCeiling}, "ceiling", "the session's ceiling `duration`, from its first start, across windows and restarts (default: none)")
	fs.Var(durationFlag{d: &flagPolicy.EvidenceTTL, off: true}, "ttl", "evidence on another channel at most this `old` defers the idle rule (default 30s; off: stdout only)")
	fs.Func("settle", "consecutive stale `observations` before the idle rule stops the command (default 3)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("want a whole number of observations, at least 1")
		}
		settle, settleSet = n, true
		return nil
	})
	fs.Var(durationFlag{d: &flagPolicy.SettleInterval}, "settle-interval", "the `interval` between those observations (default 10s)")
	fs.Var(durationFlag{d: &flagPolicy.StartupGrace}, "startup-grace", "the idle rule arms at the first output or after this `duration` (default: at once)")
	fs.Var(durationFlag{d: &flagPolicy.MaxIdleDeferral}, "max-deferral", "past this much `deferral` in one idle episode, silence is fatal even with evidence (default: no cap)")
	fs.StringVar(&mode, "mode", "", "act (default) or shadow: record the decisions but stop nothing")
	fs.StringVar(&workspace, "workspace", "", "a `directory` whose file changes (git work included) are evidence")
	fs.Var(&ignore, "workspace-ignore", "a `pattern` of the workspace to ignore (repeatable; default .git)")
	fs.StringVar(&o.policyFile, "policy", "", "a policy JSON `file` (the knobs sessionwatchdog whatif reads); the flags above override its knobs")
	fs.StringVar(&o.session, "session", "", "the session `id` (default: generated, and printed); the same id and log resume the session")
	fs.StringVar(&o.logPath, "log", "", "the event log `file` (JSON Lines, the file store; default sessionwatchdog-SESSION.jsonl here)")
	fs.StringVar(&o.dsn, "dsn", "", "record to PostgreSQL at this `DSN` (the stores/postgres table) instead of a file")
	fs.StringVar(&o.table, "table", "", "with --dsn: the events `table` (default watchdog_events)")
	o.grace = defaultGrace
	fs.Var(durationFlag{d: &o.grace}, "grace", "how long the process tree has between SIGTERM and SIGKILL, a `duration`")
	fs.StringVar(&o.events, "events", "", "parse CMD's stdout as this agent event `format`: "+strings.Join(agentevents.Names(), ", ")+"\n(claude: claude -p --output-format stream-json --verbose; codex: codex exec --json;\ngemini: gemini -p --output-format stream-json; cursor: cursor-agent -p --output-format stream-json)")
	o.callCap, o.subagentCap = defaultCallCap, defaultSubagentCap
	fs.Var(durationFlag{d: &o.callCap}, "call-cap", "with --events: the longest `duration` a tool call in flight defers the idle rule")
	fs.Var(durationFlag{d: &o.subagentCap}, "subagent-cap", "with --events: the longest `duration` a sub-agent in flight defers the idle rule")
	o.postTurn = defaultPostTurn
	fs.Var(durationFlag{d: &o.postTurn, off: true}, "post-turn-grace", "with --events: how long the agent may stay, its turn ended and no call in flight, before it is\nstopped as finished but not exited (exit 123; off: never)")
	fs.StringVar(&o.stdoutMode, "stdout", "all", "what of CMD's stdout is evidence: all (every write) or lines (a line that repeats none of the\nlast 8); with --events, what of the lines that are not events is")
	fs.StringVar(&o.stderrMode, "stderr", "lines", "what of CMD's stderr is evidence: lines (a line that repeats none of the last 8), all\n(every write) or none")
	o.checkpoints = defaultCheckpoints
	fs.Var(durationFlag{d: &o.checkpoints}, "checkpoints", "record the session's evidence this `often` when it changed, so a resume continues\nthe idle rule from it (0: never)")
	fs.StringVar(&o.operator, "operator", "", "who an operator's stop by signal is recorded as (default USER@HOST)")
	fs.StringVar(&o.progress, "progress", "auto", "the progress line on stderr: auto (when stderr is a terminal), always or never")

	bad := func(format string, a ...any) (options, int, bool) {
		diag(stderr, format, a...)
		fmt.Fprintln(stderr, "run 'sessionwatchdog help run' for usage")
		return options{}, ExitUsage, false
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			var b strings.Builder
			fs.SetOutput(&b)
			fs.PrintDefaults()
			fmt.Fprintf(stdout, Usage, b.String())
			return options{}, 0, false
		}
		fmt.Fprintln(stderr, "run 'sessionwatchdog help run' for usage")
		return options{}, ExitUsage, false
	}
	o.command = fs.Args()
	if len(o.command) == 0 {
		return bad("no command to run: sessionwatchdog run [flags] -- CMD [ARGS...]")
	}
	if o.command[0] == "" {
		return bad("empty command name")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// The policy: the file's knobs, then the flags given.
	if o.policyFile != "" {
		b, err := os.ReadFile(o.policyFile)
		if err != nil {
			return bad("--policy: %v", err)
		}
		if err := json.Unmarshal(b, &o.policy); err != nil {
			return bad("--policy %s: %v", o.policyFile, err)
		}
	}
	p := &o.policy
	for name, field := range map[string]struct{ dst, src *time.Duration }{
		"wall": {&p.WallClock, &flagPolicy.WallClock}, "idle": {&p.IdleWindow, &flagPolicy.IdleWindow},
		"ceiling": {&p.SessionCeiling, &flagPolicy.SessionCeiling}, "ttl": {&p.EvidenceTTL, &flagPolicy.EvidenceTTL},
		"settle-interval": {&p.SettleInterval, &flagPolicy.SettleInterval}, "startup-grace": {&p.StartupGrace, &flagPolicy.StartupGrace},
		"max-deferral": {&p.MaxIdleDeferral, &flagPolicy.MaxIdleDeferral},
	} {
		if set[name] {
			*field.dst = *field.src
		}
	}
	if settleSet {
		p.SettleChecks = settle
	}
	switch mode {
	case "":
	case "act", "shadow":
		p.Mode = watchdog.Mode(mode)
	default:
		return bad("--mode %q: want act or shadow", mode)
	}
	if workspace != "" {
		abs, err := filepath.Abs(workspace)
		if err != nil {
			return bad("--workspace %s: %v", workspace, err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return bad("--workspace %s: not a directory", workspace)
		}
		p.WorkspaceRoot = abs
	}
	if len(ignore) > 0 {
		p.WorkspaceIgnore = ignore
	}
	if o.stderrMode != "none" && !contains(p.Channels, stderrChannel) {
		p.Channels = append(p.Channels, stderrChannel)
	}
	if err := p.Validate(); err != nil {
		return bad("the policy: %v", err)
	}

	switch o.stdoutMode {
	case "all", "lines":
	default:
		return bad("--stdout %q: want all or lines", o.stdoutMode)
	}
	switch o.stderrMode {
	case "all", "lines", "none":
	default:
		return bad("--stderr %q: want lines, all or none", o.stderrMode)
	}
	switch o.progress {
	case "auto", "always", "never":
	default:
		return bad("--progress %q: want auto, always or never", o.progress)
	}
	if o.events != "" {
		parser, err := agentevents.New(o.events)
		if err != nil {
			return bad("--events: %v", err)
		}
		o.parser = parser
	} else if set["post-turn-grace"] {
		return bad("--post-turn-grace needs --events (a turn's end is read from the agent's events)")
	}
	if o.callCap == 0 || o.subagentCap == 0 {
		return bad("--call-cap and --subagent-cap must be positive")
	}
	if o.grace == 0 {
		return bad("--grace must be positive")
	}
	if o.dsn != "" && set["log"] {
		return bad("--log and --dsn are exclusive: record to a file or to PostgreSQL")
	}
	if o.table != "" && o.dsn == "" {
		return bad("--table needs --dsn (it names a PostgreSQL table)")
	}
	if set["session"] {
		if err := checkText("--session", o.session, 256); err != nil {
			return bad("%v", err)
		}
	} else {
		o.session = newSessionID()
	}
	if o.dsn == "" && o.logPath == "" {
		o.logPath = "sessionwatchdog-" + fileSafe(o.session) + ".jsonl"
	}
	if o.operator == "" {
		o.operator = defaultOperator()
	} else if err := checkText("--operator", o.operator, 256); err != nil {
		return bad("%v", err)
	}
	return o, 0, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkText refuses an empty value, one longer than max bytes, and one that
// is not printable UTF-8 text.
func checkText(flag, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("%s: empty", flag)
	case len(v) > max:
		return fmt.Errorf("%s: %d bytes long, at most %d", flag, len(v), max)
	case !strings.ContainsFunc(v, func(r rune) bool { return r != ' ' }):
		return fmt.Errorf("%s: blank", flag)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xFFFD }):
		return fmt.Errorf("%s %q: holds a control character or invalid UTF-8", flag, v)
	}
	return nil
}

// newSessionID is a fresh session id: run-, the UTC time, and 6 random
// hex digits.
func newSessionID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "run-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// fileSafe makes a session id usable in a file name.
func fileSafe(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, id)
}

// defaultOperator is USER@HOST, or what of it is known.
func defaultOperator() string {
	user := os.Getenv("USER")
	if user == "" {
		user = os.Getenv("LOGNAME")
	}
	if user == "" {
		user = "uid" + strconv.Itoa(os.Getuid())
	}
	host, _ := os.Hostname()
	if host != "" {
		user += "@" + host
	}
	if checkText("operator", user, 256) != nil {
		return "operator"
	}
	return user
}

// diag prints one line of the wrapper's own on w (its stderr, which also
// carries the command's stderr unchanged), escaped as the other
// subcommands' output is: a command name, a path or a database's error
// can hold bytes a terminal would act on.
func diag(w io.Writer, format string, a ...any) {
	fmt.Fprintln(w, "sessionwatchdog run: "+termsafe.String(fmt.Sprintf(format, a...)))
}
