package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
)

// envRequire makes a missing server a failure, not a skip (CI sets it).
const envRequire = "WATCHDOG_REQUIRE_PG"

// TestMain lets the test binary be the worker and the orchestrator too: the supervisor
// re-executes os.Executable, which is this binary under go test.
func TestMain(m *testing.M) {
	if code, ok := runRole(); ok {
		os.Exit(code)
	}
	if os.Getenv(envDSN) == "" && os.Getenv(envRequire) == "" {
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING the fleet example's test: %s is not set.\n"+
			"*** Run it with a throw-away server: ../../scripts/with-postgres go test ./...\n\n", envDSN)
	}
	os.Exit(m.Run())
}

// TestFleet runs the supervisor, which runs the worker as a second process;
// they share only the PostgreSQL database. supervise fails unless the worker
// exits with the supervisor's wall-clock stop reason.
func TestFleet(t *testing.T) {
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		if os.Getenv(envRequire) != "" {
			t.Fatalf("%s is set but %s is not: the PostgreSQL server did not start", envRequire, envDSN)
		}
		t.Skipf("SKIPPED: no PostgreSQL (%s unset); run ../../scripts/with-postgres go test ./...", envDSN)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	table := "fleet_" + hex.EncodeToString(b[:]) // a table of its own
	var out bytes.Buffer
	err := supervise(context.Background(), dsn, table, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
