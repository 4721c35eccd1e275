package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgtest"
)

func TestMain(m *testing.M) {
	if code, ok := topRole(); ok {
		os.Exit(code)
	}
	pgtest.Banner("cmd/sessionwatchdog/internal/cli")
	os.Exit(m.Run())
}

// recordFixture records testdata/sessions.jsonl through the PostgreSQL
// store into a fresh table and returns the DSN and the table.
func recordFixture(t *testing.T) (dsn, table string) {
	t.Helper()
	pool := pgtest.Pool(t)
	events, err := eventlog.ReadFile(data+"/sessions.jsonl", nil)
	if err != nil {
		t.Fatal(err)
	}
	return pgtest.DSN(t), pgtest.Record(t, pool, events)
}

// The same log read from PostgreSQL gives the same output as from its file:
// the golden outputs of the file tests hold for --dsn too.
func TestInspectDSNGolden(t *testing.T) {
	dsn, table := recordFixture(t)
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"sessions.txt", []string{"inspect", "--dsn", dsn, "--table", table}},
		{"agent-42.json", []string{"inspect", "--json", "--session", "agent-42", "--dsn", dsn, "--table", table}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			if *update {
				t.Skip("the golden files are written by the file tests")
			}
			code, out, errs := run(t, "", tt.args...)
			if code != ExitOK || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			golden(t, tt.golden, out)
		})
	}
}

func TestInspectDSNHTML(t *testing.T) {
	dsn, table := recordFixture(t)
	out := filepath.Join(t.TempDir(), "report.html")
	code, stdout, errs := run(t, "", "inspect", "--html", out, "--dsn", dsn, "--table", table)
	if code != ExitOK || stdout != "" || !strings.Contains(errs, "wrote "+out+" (4 sessions)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("postgres:"+table)) || !bytes.Contains(b, []byte(`data-session="agent-42"`)) {
		t.Errorf("the page does not name its source postgres:%s or lacks a session: %.300s", table, b)
	}
	if bytes.Contains(b, []byte(dsn)) {
		t.Errorf("the page shows the DSN")
	}
}

func TestVerifyDSN(t *testing.T) {
	dsn, table := recordFixture(t)
	code, out, errs := run(t, "", "verify", "--dsn", dsn, "--table", table)
	want := "postgres:" + table + ": ok (4 sessions, 20 events, 12 verdicts and outcomes checked)"
	if code != ExitOK || errs != "" || !strings.Contains(out, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	if strings.Contains(out, dsn) {
		t.Errorf("the output shows the DSN: %q", out)
	}
	code, out, _ = run(t, "", "verify", "--session", "agent-42", "--dsn", dsn, "--table", table)
	if code != ExitOK || !strings.Contains(out, ": ok (1 sessions") {
		t.Errorf("--session: exit %d, stdout %q", code, out)
	}
}

func TestDSNErrors(t *testing.T) {
	dsn := pgtest.DSN(t)
	missing := pgtest.Table(t)
	for _, tt := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"missing table", []string{"inspect", "--dsn", dsn, "--table", missing}, "table " + missing + " does not exist"},
		{"verify missing table", []string{"verify", "--dsn", dsn, "--table", missing}, "table " + missing + " does not exist"},
		{"bad table name", []string{"inspect", "--dsn", dsn, "--table", "a-b"}, `table name "a-b"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, "", tt.args...)
			if code != ExitUsage || out != "" || !strings.Contains(errs, tt.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errs, ExitUsage, tt.stderr)
			}
		})
	}
}

// Flag combinations are checked before any connection, so these run
// without a server.
func TestDSNUsage(t *testing.T) {
	for _, tt := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"dsn and file", []string{"inspect", "--dsn", "host=/tmp", data + "/sessions.jsonl"}, "give no event log file too"},
		{"verify dsn and file", []string{"verify", "--dsn", "host=/tmp", data + "/sessions.jsonl"}, "give no event log file too"},
		{"table without dsn", []string{"inspect", "--table", "t", data + "/sessions.jsonl"}, "--table needs --dsn"},
		{"unparsable dsn", []string{"inspect", "--dsn", "postgres://u:s3cret@[x"}, "cannot be parsed"},
		{"unreachable", []string{"verify", "--dsn", "host=/nonexistent-watchdog-dir port=1 user=x dbname=x connect_timeout=5"}, "connect to PostgreSQL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, "", tt.args...)
			if code != ExitUsage || out != "" || !strings.Contains(errs, tt.stderr) || strings.Contains(errs, "s3cret") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errs, ExitUsage, tt.stderr)
			}
		})
	}
	code, out, _ := run(t, "", "help", "inspect")
	if code != ExitOK || !strings.Contains(out, "-dsn DSN") || !strings.Contains(out, "-table table") {
		t.Errorf("help inspect lacks the --dsn and --table flags:\n%s", out)
	}
}

// inspect --open --dsn reads the fleet's leases: a window whose owner's
// lease expired shows so, on the database's clock.
func TestInspectOpenDSNShowsAnExpiredLease(t *testing.T) {
	pool := pgtest.Pool(t)
	now := time.Now().UTC()
	p := watchdog.Policy{WallClock: time.Hour}
	start := watchdog.Event{ID: "s1", AggregateID: "orphan", Kind: watchdog.KindStart, Window: 1, SessionStartedAt: now,
		WindowStartedAt: now, OccurredAt: now, Owner: "dead-owner", Policy: &p}
	table := pgtest.Record(t, pool, []watchdog.Event{start})
	if _, err := pool.Exec(context.Background(), `INSERT INTO `+table+`_leases (owner, expires_at, last_seen) VALUES ('dead-owner', now() - interval '10 seconds', now() - interval '16 seconds')`); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "", "inspect", "--open", "--dsn", pgtest.DSN(t), "--table", table)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"1 open windows", "0 past their deadline", "1 whose owner's lease has expired", "orphan", "dead-owner", "due in", "expired 10"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// whatif reads the PostgreSQL store as it reads the file: the same report,
// but for the source it names.
func TestWhatIfDSNMatchesTheFile(t *testing.T) {
	pool := pgtest.Pool(t)
	events, err := eventlog.ReadFile(data+"/checkpoints.jsonl", nil)
	if err != nil {
		t.Fatal(err)
	}
	dsn, table := pgtest.DSN(t), pgtest.Record(t, pool, events)
	code, fromDB, errs := run(t, "", "whatif", "--policy", stricter, "--checkpoints", "1s", "--dsn", dsn, "--table", table)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	_, fromFile, _ := run(t, "", "whatif", "--policy", stricter, "--checkpoints", "1s", data+"/checkpoints.jsonl")
	_, dbBody, _ := strings.Cut(fromDB, "\n")
	_, fileBody, _ := strings.Cut(fromFile, "\n")
	if !strings.HasPrefix(fromDB, "what-if of postgres:"+table+" ") || dbBody != fileBody {
		t.Fatalf("from PostgreSQL:\n%s\nfrom the file:\n%s", fromDB, fromFile)
	}
}
