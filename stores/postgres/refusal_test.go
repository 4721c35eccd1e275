package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// The tests of this file produce each refusal for real: the event passes
// Event.Validate, and the database refuses its insert. An operator's index
// or constraint on the events table is the realistic way to get there with
// the store's own schema, which holds whatever Validate lets through.

// requireRefusedForGood appends the batch first, bad, last and checks that
// the database refused bad with SQLSTATE code, that the store reports it
// as refused for good (ErrInvalidEvent, naming bad, the same on a retry)
// with nothing recorded, and that first and last, appended without it, are
// recorded.
func requireRefusedForGood(t *testing.T, s *Store, bad watchdog.Event, code string) {
	t.Helper()
	ctx := context.Background()
	first := ev(bad.ID+"-first", bad.AggregateID, watchdog.KindStart, bad.Window)
	last := ev(bad.ID+"-last", bad.AggregateID, watchdog.KindStop, bad.Window)
	first.Extra = map[string]json.RawMessage{"x_tenant": json.RawMessage(`"t1"`)}
	last.Extra = first.Extra
	for _, attempt := range []string{"first attempt", "retry"} {
		err := s.Append(ctx, first, bad, last)
		require.ErrorIs(t, err, watchdog.ErrInvalidEvent, "%s: a refusal for good, not an error to retry until Close", attempt)
		require.NotErrorIs(t, err, watchdog.ErrAlreadyDecided, attempt)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: the database's error is wrapped: %v", attempt, err)
		require.Equal(t, code, pgErr.Code, "%s: %v", attempt, err)
		require.Contains(t, err.Error(), fmt.Sprintf("event %q", bad.ID), "%s: the error names the refused event", attempt)
		evs, err := s.Load(ctx, bad.AggregateID)
		require.NoError(t, err)
		require.Empty(t, evs, "%s: the batch is atomic", attempt)
	}
	require.NoError(t, s.Append(ctx, first, last), "the rest of the batch is not held against")
	evs, err := s.Load(ctx, bad.AggregateID)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, []string{first.ID, last.ID}, []string{evs[0].ID, evs[1].ID})

	// AppendEach refuses the event alone: the rest of its batch, of its
	// session and of another, is recorded.
	mine := ev(bad.ID+"-each", bad.AggregateID, watchdog.KindResume, bad.Window)
	other := ev(bad.ID+"-other", bad.AggregateID+"-other", watchdog.KindStart, 1)
	mine.Extra, other.Extra = first.Extra, first.Extra
	errs := s.AppendEach(ctx, []watchdog.Event{mine, bad, other})
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[1], watchdog.ErrInvalidEvent)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(errs[1], &pgErr), "the database's error is wrapped: %v", errs[1])
	require.Equal(t, code, pgErr.Code)
	evs, err = s.Load(ctx, bad.AggregateID)
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.Equal(t, mine.ID, evs[2].ID)
}

// storeWith returns a Store on a new table, altered by the operator's
// statements (with %s standing for the table).
func storeWith(t *testing.T, pool *pgxpool.Pool, operator ...string) *Store {
	t.Helper()
	table := uniqueTable(t)
	s := newStore(t, pool, WithTable(table))
	for _, stmt := range operator {
		_, err := pool.Exec(context.Background(), fmt.Sprintf(stmt, table))
		require.NoError(t, err, stmt)
	}
	return s
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n/2)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// SQLSTATE 54000: index row size exceeds the btree maximum (2,704 bytes).
func TestAnEventTooLongForAnIndexIsRefusedForGood(t *testing.T) {
	s := storeWith(t, testPool(t), `CREATE INDEX ON %s ((event::text))`)
	bad := ev("long", "a", watchdog.KindResume, 1)
	bad.Extra = map[string]json.RawMessage{"x_blob": json.RawMessage(`"` + randomHex(t, 6000) + `"`)}
	requireRefusedForGood(t, s, bad, "54000")
}

// SQLSTATE 22P05: a NUL escaped inside an Extra value is valid JSON (and
// Event.Validate lets it through), but PostgreSQL's text cannot hold it, so
// an index an operator added on that field refuses the event.
func TestTextTheDatabaseEncodingCannotHoldIsRefusedForGood(t *testing.T) {
	s := storeWith(t, testPool(t), `CREATE INDEX ON %s ((event->>'x_note'))`)
	bad := ev("nul", "a", watchdog.KindResume, 1)
	bad.Extra = map[string]json.RawMessage{"x_note": json.RawMessage(`"a NUL \u0000 here"`)}
	require.NoError(t, bad.Validate(), "the database refuses it, not Validate")
	requireRefusedForGood(t, s, bad, "22P05")
}

// SQLSTATE 23514: a check constraint an operator added.
func TestAnEventACheckConstraintRefusesIsRefusedForGood(t *testing.T) {
	s := storeWith(t, testPool(t), `ALTER TABLE %s ADD CONSTRAINT runtime_kinds_only CHECK (event_kind LIKE 'runtime.%%')`)
	requireRefusedForGood(t, s, ev("custom", "a", "custom.kind", 1), "23514")
}

// SQLSTATE 23502: a NOT NULL column an operator added, computed from the
// event's JSON.
func TestAnEventANotNullColumnRefusesIsRefusedForGood(t *testing.T) {
	s := storeWith(t, testPool(t), `ALTER TABLE %s ADD COLUMN tenant text GENERATED ALWAYS AS (event->>'x_tenant') STORED NOT NULL`)
	requireRefusedForGood(t, s, ev("notenant", "a", watchdog.KindResume, 1), "23502")
}

// The Watchdog's recorder does not retry an event the database refuses for
// good: Close reports it as refused at once, not as an event it could not
// record by its deadline.
func TestTheRecorderDoesNotRetryAnEventTheDatabaseRefusesForGood(t *testing.T) {
	s := storeWith(t, testPool(t), `ALTER TABLE %s ADD CONSTRAINT no_stops CHECK (event_kind <> 'runtime.watchdog.stop')`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := watchdog.New(watchdog.WithStore(s))
	sess, err := w.Start(ctx, "refused-stop", time.Now(), watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, sess.Stop())
	err = w.Close(ctx)
	require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
	require.NotErrorIs(t, err, watchdog.ErrNotRecorded, "retried until Close's deadline: %v", err)
	require.NoError(t, ctx.Err())
	evs, err := s.Load(context.Background(), "refused-stop")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, watchdog.KindStart, evs[0].Kind)
}

// A connection lost in the middle of an event's insert (SQLSTATE 57P01: the
// backend is terminated while the insert waits for a lock) is no refusal:
// the error is returned for the caller to retry, and the retry records the
// event.
func TestAConnectionLostDuringAnInsertStaysRetryable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := testPool(t)
	table := uniqueTable(t)
	cfg, err := pgxpool.ParseConfig(os.Getenv(envDSN))
	require.NoError(t, err)
	app := "watchdog test " + table
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool, WithTable(table))

	// Another transaction holds an uncommitted row with the same event_id:
	// the store's insert (ON CONFLICT) waits for it to end.
	blocker, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(context.Background())
	_, err = blocker.Exec(ctx, `INSERT INTO `+table+` (event_id, aggregate_id, event_kind, window_number, terminal, event)
		VALUES ('e1', 'a', 'k', 1, false, '{}')`)
	require.NoError(t, err)

	e := ev("e1", "a", watchdog.KindStart, 1)
	done := make(chan error, 1)
	go func() { done <- s.Append(ctx, e) }()
	var pid int32
	bound := time.Now().Add(testwait.Bound)
	for { // until the store's backend waits on the blocker's transaction
		err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'transactionid'`, app).Scan(&pid)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		if time.Now().After(bound) {
			t.Fatalf("waited %v for the store's backend to wait on the blocker's lock", testwait.Bound)
		}
	}
	var killed bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)

	err = testwait.For(t, done, "Append to return once its backend was terminated")
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the server's FATAL error is returned: %v", err)
	require.Equal(t, "57P01", pgErr.Code, "%v", err)
	require.NotErrorIs(t, err, watchdog.ErrInvalidEvent, "a lost connection is retried, not refused for good")
	require.NotErrorIs(t, err, watchdog.ErrAlreadyDecided)

	require.NoError(t, blocker.Rollback(ctx))
	require.NoError(t, s.Append(ctx, e), "the retry")
	evs, err := s.Load(ctx, "a")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, watchdog.KindStart, evs[0].Kind)
}

// The classification of the SQLSTATEs the tests above cannot produce on
// demand: transient errors stay retryable wherever they arise; permanent
// ones are refusals for good, but only from an event's own insert.
func TestTransientDatabaseErrorsStayRetryable(t *testing.T) {
	n := newNames("events")
	pg := func(code, constraint string) error {
		return fmt.Errorf("postgres store: append: %w", &pgconn.PgError{Severity: "ERROR", Code: code, ConstraintName: constraint})
	}
	for _, c := range []struct {
		name    string
		err     error
		atEvent bool
		want    refusal
	}{
		{"admin shutdown", pg("57P01", ""), true, transient},
		{"crash shutdown", pg("57P02", ""), true, transient},
		{"cannot connect now", pg("57P03", ""), true, transient},
		{"query canceled", pg("57014", ""), true, transient},
		{"connection failure", pg("08006", ""), true, transient},
		{"connection exception", pg("08000", ""), false, transient},
		{"serialization failure", pg("40001", ""), true, transient},
		{"deadlock", pg("40P01", ""), true, transient},
		{"disk full", pg("53100", ""), true, transient},
		{"out of memory", pg("53200", ""), true, transient},
		{"read-only transaction (a failover)", pg("25006", ""), true, transient},
		{"insufficient privilege", pg("42501", ""), true, transient},
		{"undefined table", pg("42P01", ""), true, transient},
		{"unique violation of another index", pg("23505", "events_other"), true, transient},
		{"NOTIFY queue full, at commit", pg("54000", ""), false, transient},
		{"a data exception at commit", pg("22021", ""), false, transient},
		{"not a PgError", io.ErrUnexpectedEOF, true, transient},
		{"context canceled", context.Canceled, true, transient},
		{"terminal race lost", pg("23505", n.terminalIndex), true, decided},
		{"index row too big", pg("54000", ""), true, invalid},
		{"invalid byte sequence", pg("22021", ""), true, invalid},
		{"untranslatable character", pg("22P05", ""), true, invalid},
		{"value too long for a column", pg("22001", ""), true, invalid},
		{"numeric out of range", pg("22003", ""), true, invalid},
		{"not-null violation", pg("23502", ""), true, invalid},
		{"check violation", pg("23514", ""), true, invalid},
		{"a class 22 code of the wrong length", pg("22", ""), true, transient},
	} {
		assert.Equal(t, c.want, n.classify(c.err, c.atEvent), c.name)
	}
}
