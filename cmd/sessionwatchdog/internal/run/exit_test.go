//go:build unix

package run_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/cli"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
)

// mainIn runs "sessionwatchdog run ARGS..." in this process, in dir.
func mainIn(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var out, errOut bytes.Buffer
	code = run.Main(args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The command's own exit code comes back when it ends by itself; a command
// that is missing or cannot run gets the shells' 127 and 126; a command
// that kills itself with a signal, 128+N.
func TestExitCodesOfACommandThatEndsByItself(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cmd  []string
		want int
	}{
		{"success", []string{"sh", "-c", "echo ok"}, 0},
		{"its own code", []string{"sh", "-c", "exit 3"}, 3},
		{"killed by its own signal", []string{"sh", "-c", "kill -TERM $$"}, 143},
		{"not found", []string{"no-such-command-anywhere"}, run.ExitNotFound},
		{"missing path", []string{filepath.Join(dir, "missing")}, run.ExitNotFound},
		{"not executable", []string{notExec}, run.ExitNotExecutable},
		{"a directory", []string{dir}, run.ExitNotExecutable},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "events.jsonl")
			code, _, stderr := mainIn(t, dir, append([]string{"--log", log, "--grace", "300ms", "--"}, c.cmd...)...)
			if code != c.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.want, stderr)
			}
		})
	}
}

// A bad flag is exit code 2 with a message that names it, before anything
// starts or is recorded.
func TestBadFlagsAreUsageErrorsNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "no command"},
		{[]string{"--wall", "soon", "--", "true"}, "-wall"},
		{[]string{"--wall", "-1s", "--", "true"}, "-wall"},
		{[]string{"--idle", "1", "--", "true"}, "-idle"},
		{[]string{"--ttl", "x", "--", "true"}, "-ttl"},
		{[]string{"--settle", "0", "--", "true"}, "-settle"},
		{[]string{"--mode", "maybe", "--", "true"}, "--mode"},
		{[]string{"--events", "amp", "--", "true"}, "--events"},
		{[]string{"--stderr", "some", "--", "true"}, "--stderr"},
		{[]string{"--stdout", "some", "--", "true"}, "--stdout"},
		{[]string{"--post-turn-grace", "1s", "--", "true"}, "--post-turn-grace"},
		{[]string{"--events", "claude", "--post-turn-grace", "soon", "--", "true"}, "-post-turn-grace"},
		{[]string{"--progress", "sometimes", "--", "true"}, "--progress"},
		{[]string{"--log", "a.jsonl", "--dsn", "postgres://x", "--", "true"}, "--dsn"},
		{[]string{"--table", "t", "--", "true"}, "--table"},
		{[]string{"--policy", "missing.json", "--", "true"}, "--policy"},
		{[]string{"--workspace", "missing-dir", "--", "true"}, "--workspace"},
		{[]string{"--session", "", "--", "true"}, "--session"},
		{[]string{"--session", "a\nb", "--", "true"}, "--session"},
		{[]string{"--grace", "0s", "--", "true"}, "--grace"},
		{[]string{"--call-cap", "0s", "--", "true"}, "--call-cap"},
		{[]string{"--no-such-flag", "--", "true"}, "no-such-flag"},
	} {
		code, _, stderr := mainIn(t, dir, c.args...)
		if code != run.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("run %q: exit %d, stderr %q; want exit 2 naming %q", c.args, code, stderr, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a usage error left files behind: %v", entries)
	}
	policy := filepath.Join(dir, "bad-policy.json")
	if err := os.WriteFile(policy, []byte(`{"no_such_knob": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := mainIn(t, dir, "--policy", policy, "--", "true"); code != run.ExitUsage || !strings.Contains(stderr, "no_such_knob") {
		t.Errorf("a policy file with an unknown knob: exit %d, stderr %q", code, stderr)
	}
}

// The policy file's knobs apply, and a flag overrides its knob: here the
// file's 1 h wall clock is overridden by --wall, so the loop stops at once.
func TestPolicyFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"session_wall_clock_seconds": 3600, "settle_checks": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "events.jsonl")
	code, _, stderr := mainIn(t, dir, "--policy", policy, "--wall", "300ms", "--grace", "300ms", "--log", log, "--", "sh", "-c", "while :; do sleep 0.05; echo x; done")
	if code != run.ExitWallClock {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, run.ExitWallClock, stderr)
	}
	evs := events(t, log)
	if evs[0].Policy == nil || evs[0].Policy.WallClock.Seconds() != 0.3 || evs[0].Policy.SettleChecks != 1 {
		t.Errorf("recorded policy %+v, want the file's settle_checks and the flag's wall clock", evs[0].Policy)
	}
}

// Without --log the log is a file in the working directory, named after
// the session, and the command says where it is; inspect and verify read
// it; and "sessionwatchdog help run" documents the command.
func TestDefaultLogAndTheInspector(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := mainIn(t, dir, "--session", "agent/7", "--", "sh", "-c", "echo hello")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	log := filepath.Join(dir, "sessionwatchdog-agent_7.jsonl")
	if !strings.Contains(stderr, "session agent/7, window 1 (started), recording to "+log) {
		t.Errorf("stderr does not name the session and its log %s:\n%s", log, stderr)
	}
	var out, errOut bytes.Buffer
	if c := cli.Main([]string{"verify", log}, nil, &out, &errOut); c != 0 {
		t.Errorf("verify: exit %d\n%s%s", c, out.String(), errOut.String())
	}
	out.Reset()
	if c := cli.Main([]string{"inspect", log}, nil, &out, &errOut); c != 0 || !strings.Contains(out.String(), "agent/7") || !strings.Contains(out.String(), "completed") {
		t.Errorf("inspect: exit %d\n%s%s", c, out.String(), errOut.String())
	}
	out.Reset()
	if c := cli.Main([]string{"help", "run"}, nil, &out, &errOut); c != 0 || !strings.Contains(out.String(), "124    stopped at the wall clock") || !strings.Contains(out.String(), "-call-cap") {
		t.Errorf("help run: exit %d\n%s", c, out.String())
	}
}

// With a terminal (--progress always stands for one), a progress line is
// kept on stderr while the command runs, and erased before the command's
// own output and the summary.
func TestProgressLine(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	code, stdout, stderr := mainIn(t, dir, "--progress", "always", "--log", log, "--", "sh", "-c", "sleep 1.3; echo out; echo err >&2")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%q", code, stderr)
	}
	if !strings.Contains(stderr, "\r\033[K[sessionwatchdog] ") || !strings.Contains(stderr, "\r\033[Kerr\n") {
		t.Errorf("no progress line, erased before the command's stderr: %q", stderr)
	}
	if stdout != "out\n" {
		t.Errorf("stdout %q", stdout)
	}
	if code, _, stderr := mainIn(t, dir, "--log", filepath.Join(dir, "quiet.jsonl"), "--", "sh", "-c", "sleep 1.3"); code != 0 || strings.Contains(stderr, "\033") {
		t.Errorf("without a terminal: exit %d, stderr %q; want no progress line", code, stderr)
	}
}

// The wrapper's own messages on stderr are escaped for the terminal, as the
// other subcommands' output is (its stderr also carries the command's, which
// passes unchanged): a command name, a flag's name or a file name holding an
// escape sequence reaches the terminal as text.
func TestTheWrappersOwnMessagesAreEscapedForTheTerminal(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--", "no-such\x1b]0;pwned\acommand"}, run.ExitNotFound},
		{[]string{"--no\x1b[2Jflag", "--", "true"}, run.ExitUsage},
		{[]string{"--policy", "missing\x1b[31m.json", "--", "true"}, run.ExitUsage},
	} {
		code, _, stderr := mainIn(t, dir, c.args...)
		if code != c.code || strings.ContainsAny(stderr, "\x1b\a") || !strings.Contains(stderr, `\u001b`) {
			t.Errorf("run %q: exit %d, stderr %q; want exit %d and the escape sequence written as text", c.args, code, stderr, c.code)
		}
	}
}
