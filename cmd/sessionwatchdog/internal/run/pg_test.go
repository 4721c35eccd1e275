//go:build unix

package run_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/cli"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgtest"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/run"
)

// With --dsn the session is recorded in PostgreSQL (the stores/postgres
// table, --table), never naming the DSN; inspect --dsn and verify --dsn
// read it.
func TestRecordToPostgreSQL(t *testing.T) {
	dsn := pgtest.DSN(t)
	table := pgtest.Table(t)
	dir := t.TempDir()
	code, _, stderr := mainIn(t, dir, "--dsn", dsn, "--table", table, "--session", "pg-run", "--wall", "500ms", "--grace", "300ms",
		"--", "sh", "-c", "while :; do echo x; sleep 0.05; done")
	if code != run.ExitWallClock {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, run.ExitWallClock, stderr)
	}
	if !strings.Contains(stderr, "recording to postgres table "+table) || strings.Contains(stderr, dsn) {
		t.Errorf("stderr should name the table, never the DSN:\n%s", stderr)
	}
	var out, errOut bytes.Buffer
	if c := cli.Main([]string{"verify", "--dsn", dsn, "--table", table}, nil, &out, &errOut); c != 0 {
		t.Errorf("verify --dsn: exit %d\n%s%s", c, out.String(), errOut.String())
	}
	out.Reset()
	if c := cli.Main([]string{"inspect", "--dsn", dsn, "--table", table}, nil, &out, &errOut); c != 0 || !strings.Contains(out.String(), "wall_clock_exceeded") {
		t.Errorf("inspect --dsn: exit %d\n%s%s", c, out.String(), errOut.String())
	}
}

// A stop requested from elsewhere ("sessionwatchdog stop", as the role the
// DSN connects as) ends "run --dsn" with its own exit code, 119, after the
// command was stopped; the stop event names the role and why.
func TestARemoteStopEndsRunWithExitCode119(t *testing.T) {
	dsn := pgtest.DSN(t)
	pool := pgtest.Pool(t)
	table := pgtest.Table(t)
	dir := t.TempDir()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := mainIn(t, dir, "--dsn", dsn, "--table", table, "--session", "remote", "--wall", "1h", "--grace", "300ms",
			"--", "sh", "-c", "while :; do echo x; sleep 0.05; done")
		done <- result{code, stderr}
	}()
	// The window is open once the windows table says so (a real process's
	// start: polled, bounded).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var open bool
		err := pool.QueryRow(context.Background(), `SELECT open FROM `+table+`_windows WHERE aggregate_id = 'remote'`).Scan(&open)
		if err == nil && open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run did not open its window within 30 s (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var out, errOut bytes.Buffer
	if c := cli.Main([]string{"stop", "--dsn", dsn, "--table", table, "--why", "runaway", "remote"}, nil, &out, &errOut); c != 0 {
		t.Fatalf("stop: exit %d\n%s%s", c, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "stopped: window 1, by its owner") {
		t.Errorf("stop's output:\n%s", out.String())
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute): // a guard against a hung run
		t.Fatal("run did not end within a minute of the stop")
	}
	if r.code != run.ExitRemoteStop || !strings.Contains(r.stderr, "a remote stop request") {
		t.Fatalf("run: exit %d, want %d; stderr:\n%s", r.code, run.ExitRemoteStop, r.stderr)
	}
	out.Reset()
	if c := cli.Main([]string{"stop", "--dsn", dsn, "--table", table, "--why", "again", "remote"}, nil, &out, &errOut); c != cli.ExitNotStopped ||
		!strings.Contains(out.String(), "had already ended: runtime.watchdog.stop stop_requested by ") || !strings.Contains(out.String(), "(runaway)") {
		t.Errorf("a second stop: exit %d\n%s", c, out.String())
	}
	out.Reset()
	if c := cli.Main([]string{"stop", "--dsn", dsn, "--table", table, "--why", "x", "nobody"}, nil, &out, &errOut); c != cli.ExitNotStopped ||
		!strings.Contains(out.String(), `session "nobody" is unknown: no fleet member has opened a window of this session`) {
		t.Errorf("an unknown session: exit %d\n%s", c, out.String())
	}
}

// A JSON Lines log has one writer: stop says plainly that remote stop
// needs PostgreSQL, and how to stop such a run instead.
func TestStopOnAFileLogSaysRemoteStopNeedsPostgreSQL(t *testing.T) {
	var out, errOut bytes.Buffer
	if c := cli.Main([]string{"stop", "--log", "runs.jsonl", "--why", "x", "s"}, nil, &out, &errOut); c != cli.ExitUsage ||
		!strings.Contains(errOut.String(), "remote stop needs PostgreSQL (--dsn)") || !strings.Contains(errOut.String(), "exits 143") {
		t.Errorf("exit %d\n%s", c, errOut.String())
	}
}
