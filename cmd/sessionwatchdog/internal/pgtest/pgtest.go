// Package pgtest gives the inspector's tests a PostgreSQL server and a
// table of recorded events on it. WATCHDOG_PG_DSN names the server (the
// repository's scripts/test starts a throw-away one through
// scripts/with-postgres); without it the tests are skipped, loudly, unless
// WATCHDOG_REQUIRE_PG is set (CI sets it), in which case they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

// The environment variables the tests read.
const (
	EnvDSN     = "WATCHDOG_PG_DSN"
	EnvRequire = "WATCHDOG_REQUIRE_PG"
)

// Banner prints a warning to stderr when the PostgreSQL tests will be
// skipped; call it from TestMain so that a skip cannot go unnoticed.
func Banner(pkg string) {
	if os.Getenv(EnvDSN) == "" && os.Getenv(EnvRequire) == "" {
		fmt.Fprintf(os.Stderr, "\n*** %s: SKIPPING the PostgreSQL tests: %s is not set.\n"+
			"*** Run them with a throw-away server: ../../scripts/with-postgres go test ./...\n"+
			"*** (./scripts/test at the repository root does this for you.)\n\n", pkg, EnvDSN)
	}
}

// DSN returns the test server's DSN. It skips the test without one, or
// fails it under WATCHDOG_REQUIRE_PG.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%s is set but %s is not: the PostgreSQL server did not start", EnvRequire, EnvDSN)
		}
		t.Skipf("SKIPPED: no PostgreSQL (%s unset); run ../../scripts/with-postgres go test ./...", EnvDSN)
	}
	return dsn
}

// Pool returns a pool on the test server, closed at the end of the test.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New(%s): %v", EnvDSN, err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("PostgreSQL at %s=%q is unreachable: %v", EnvDSN, dsn, err)
	}
	return pool
}

// Table returns a table name no other test uses.
func Table(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "wdi_" + hex.EncodeToString(b[:])
}

// Record appends events, in order, to a new table through the PostgreSQL
// store (which creates it) and returns the table's name. A fresh table
// numbers the rows from 1, so events read back from a log whose seq runs
// from 1 keep their seq.
func Record(t testing.TB, pool *pgxpool.Pool, events []watchdog.Event) string {
	t.Helper()
	table := Table(t)
	store, err := postgres.New(context.Background(), pool, postgres.WithTable(table))
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	defer store.Close()
	for _, e := range events {
		e.Seq = 0
		if err := store.Append(context.Background(), e); err != nil {
			t.Fatalf("append %s: %v", e.ID, err)
		}
	}
	return table
}
