package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests need a PostgreSQL server: WATCHDOG_PG_DSN names it. The test
// command (../../scripts/test, through ../../scripts/with-postgres) starts a
// throw-away server and sets it. Without it the tests are skipped, loudly,
// unless WATCHDOG_REQUIRE_PG is set (CI sets it), in which case they fail.
const (
	envDSN     = "WATCHDOG_PG_DSN"
	envRequire = "WATCHDOG_REQUIRE_PG"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runChild(role))
	}
	if os.Getenv(envDSN) == "" && os.Getenv(envRequire) == "" {
		fmt.Fprintf(os.Stderr, "\n"+
			"**********************************************************************\n"+
			"* SKIPPING every PostgreSQL store test: %s is not set.\n"+
			"* Run them with a throw-away server:  ../../scripts/with-postgres go test ./...\n"+
			"* (./scripts/test at the repository root does this for you.)\n"+
			"**********************************************************************\n\n", envDSN)
	}
	os.Exit(m.Run())
}

// testPool returns a pool on the test server, closed at the end of the test;
// it skips the test (or fails it under WATCHDOG_REQUIRE_PG) without one.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		if os.Getenv(envRequire) != "" {
			t.Fatalf("%s is set but %s is not: the PostgreSQL server did not start", envRequire, envDSN)
		}
		t.Skipf("SKIPPED: no PostgreSQL (%s unset); run ../../scripts/with-postgres go test ./...", envDSN)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New(%s=%q): %v", envDSN, dsn, err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("PostgreSQL at %s=%q is unreachable: %v", envDSN, dsn, err)
	}
	return pool
}

// uniqueTable returns a table name no other test uses.
func uniqueTable(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "wdt_" + hex.EncodeToString(b[:])
}

// newStore returns a Store on its own table, closed at the end of the test.
func newStore(t testing.TB, pool *pgxpool.Pool, opts ...Option) *Store {
	t.Helper()
	s, err := New(context.Background(), pool, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
