//go:build unix

package run_test

import (
	"bytes"
	"strings"
	"testing"

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
