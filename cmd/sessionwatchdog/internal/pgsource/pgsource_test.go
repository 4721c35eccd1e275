package pgsource

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/eventlog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Banner("cmd/sessionwatchdog/internal/pgsource")
	os.Exit(m.Run())
}

func fixture(t *testing.T) []watchdog.Event {
	t.Helper()
	events, err := eventlog.ReadFile("../../testdata/sessions.jsonl", nil)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func TestReadsWhatTheStoreRecorded(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn := pgtest.DSN(t)
	want := fixture(t)
	table := pgtest.Record(t, pool, want)
	ctx := context.Background()

	got, err := Read(ctx, dsn, table, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != uint64(i+1) {
			t.Errorf("event %d: seq %d, want %d (seq order)", i, got[i].Seq, i+1)
		}
		g, w := got[i], want[i]
		g.Seq, w.Seq = 0, 0
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d (%s) differs:\n got %+v\nwant %+v", i, w.ID, g, w)
		}
	}

	only, err := Read(ctx, dsn, table, []string{"agent-42", "waiter-5"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range want {
		if e.AggregateID == "agent-42" || e.AggregateID == "waiter-5" {
			n++
		}
	}
	if len(only) != n || n == 0 {
		t.Fatalf("--session read %d events, want %d", len(only), n)
	}
	for i, e := range only {
		if e.AggregateID != "agent-42" && e.AggregateID != "waiter-5" {
			t.Errorf("event of session %q read", e.AggregateID)
		}
		if i > 0 && e.Seq <= only[i-1].Seq {
			t.Errorf("not in seq order: %d after %d", e.Seq, only[i-1].Seq)
		}
	}

	none, err := Read(ctx, dsn, table, []string{"nobody"})
	if err != nil || len(none) != 0 {
		t.Errorf("unknown session: %d events, %v", len(none), err)
	}
}

func TestMissingTableIsAnErrorAndStaysMissing(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t)
	_, err := Read(context.Background(), pgtest.DSN(t), table, nil)
	if err == nil || !strings.Contains(err.Error(), "table "+table+" does not exist") {
		t.Fatalf("err = %v", err)
	}
	var found *string
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1)::text`, table).Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found != nil {
		t.Errorf("reading created table %s: the inspector must only read", *found)
	}
}

func TestCorruptRowNamesTableAndSeq(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Record(t, pool, fixture(t)[:2])
	ctx := context.Background()
	ident := pgx.Identifier{table}.Sanitize()
	for _, bad := range []struct{ json, want string }{
		{`{"event_id":"x1","aggregate_id":"","event_kind":"k","window":1}`, "aggregate_id"},
		{`[1,2]`, "invalid event JSON"},
	} {
		var seq int64
		err := pool.QueryRow(ctx, `INSERT INTO `+ident+` (event_id, aggregate_id, event_kind, window_number, terminal, event)
VALUES ($1, 's', 'k', 1, false, $2::json) RETURNING seq`, "bad-"+bad.want, bad.json).Scan(&seq)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Read(ctx, pgtest.DSN(t), table, nil)
		var re *RowError
		if !errors.As(err, &re) || re.Seq != seq || re.Table != table || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err = %v, want a RowError at seq %d mentioning %q", bad.json, err, seq, bad.want)
		}
		if _, err := pool.Exec(ctx, `DELETE FROM `+ident+` WHERE seq = $1`, seq); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInputs(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ dsn, table, want string }{
		{"host=/tmp", "robert'); DROP TABLE x;--", "table name"},
		{"host=/tmp", "", "table name"},
		{"postgres://user:s3cret@[bad", "watchdog_events", "cannot be parsed"},
		{"host=/nonexistent-watchdog-dir port=1 user=x dbname=x connect_timeout=5", "watchdog_events", "connect to PostgreSQL"},
	} {
		_, err := Read(ctx, tt.dsn, tt.table, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Read(%q, %q) = %v, want an error mentioning %q", tt.dsn, tt.table, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error repeats the password: %v", err)
		}
	}
}
