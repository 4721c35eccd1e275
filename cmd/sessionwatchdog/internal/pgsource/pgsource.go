// Package pgsource reads a watchdog event log from PostgreSQL: the table
// that the stores/postgres event store writes (one row per event, the
// event's JSON in the "event" column, its position in "seq").
//
// It only reads: one connection, one read-only transaction, parameterised
// queries. It does not go through postgres.New, which creates the table
// when it is missing; an inspector must work with read-only credentials
// and must never change the database it inspects.
package pgsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessionwatchdog/watchdog"
)

// ConnectTimeout bounds connecting to the server when the DSN sets no
// connect_timeout of its own.
const ConnectTimeout = 30 * time.Second

// tableName is the rule of stores/postgres's WithTable: [schema.]name of
// letters, digits and underscores, at most 40 bytes each and 63 in all.
var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,39}\.)?[A-Za-z_][A-Za-z0-9_]{0,39}$`)

// RowError is an event row that is not a valid event.
type RowError struct {
	// Table is the events table.
	Table string
	// Seq is the row's seq column.
	Seq int64
	// Err is what is wrong with the row.
	Err error
}

// Error returns "table T, seq N: what is wrong".
func (e *RowError) Error() string { return fmt.Sprintf("table %s, seq %d: %v", e.Table, e.Seq, e.Err) }

// Unwrap returns the underlying error.
func (e *RowError) Unwrap() error { return e.Err }

// Read returns the events in table of the database that dsn names, in seq
// order: every event, or only those of the sessions listed (their whole
// history). Each row must decode to an event that passes
// watchdog.Event.Validate; a bad row is a *RowError naming table and seq,
// never skipped. A missing table is an error that says so.
func Read(ctx context.Context, dsn, table string, sessions []string) ([]watchdog.Event, error) {
	if !tableName.MatchString(table) || len(table) > 63 {
		return nil, fmt.Errorf("table name %q: want [schema.]name of letters, digits and underscores (at most 40 bytes each, 63 in all), as given to the store's WithTable", table)
	}
	tx, done, err := readOnly(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer done()

	ident := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	var found *string
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1)::text`, ident).Scan(&found); err != nil {
		return nil, fmt.Errorf("PostgreSQL: look up table %s: %w", table, err)
	}
	if found == nil {
		return nil, fmt.Errorf("PostgreSQL: table %s does not exist (no watchdog has recorded to it; is --table the name the store was given with WithTable?)", table)
	}

	query := `SELECT seq, event FROM ` + ident + ` ORDER BY seq`
	var args []any
	if len(sessions) > 0 {
		query = `SELECT seq, event FROM ` + ident + ` WHERE aggregate_id = ANY($1) ORDER BY seq`
		args = append(args, sessions)
	}
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: read table %s: %w", table, err)
	}
	defer rows.Close()
	events := []watchdog.Event{}
	for rows.Next() {
		var seq int64
		var raw []byte
		if err := rows.Scan(&seq, &raw); err != nil {
			return nil, fmt.Errorf("PostgreSQL: read table %s: %w", table, err)
		}
		var e watchdog.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, &RowError{Table: table, Seq: seq, Err: fmt.Errorf("invalid event JSON: %v", err)}
		}
		if err := e.Validate(); err != nil {
			return nil, &RowError{Table: table, Seq: seq, Err: err}
		}
		e.Seq = uint64(seq)
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("PostgreSQL: read table %s: %w", table, err)
	}
	return events, nil
}

// readOnly connects to the database dsn names and begins a read-only
// transaction; done rolls it back and closes the connection.
func readOnly(ctx context.Context, dsn string) (tx pgx.Tx, done func(), err error) {
	conn, err := Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	tx, err = conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("PostgreSQL: begin a read-only transaction: %w", err)
	}
	return tx, func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		_ = conn.Close(context.WithoutCancel(ctx))
	}, nil
}

// Connect connects to the database dsn names, within ConnectTimeout unless
// the DSN sets a connect_timeout. Its errors never repeat the DSN (it may
// hold a password).
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors may quote the DSN, password included: say
		// what is wrong without repeating it.
		return nil, errors.New("the PostgreSQL DSN cannot be parsed; want a URL (postgres://user@host/db) or key=value pairs (host=/run/postgresql dbname=app)")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = ConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return conn, nil
}

// Lease is an owner's lease in the leases table of a fleet (see
// stores/postgres): when it expires and when its owner was last seen, on
// the database's clock.
type Lease struct {
	ExpiresAt, LastSeen time.Time
}

// Leases returns the leases kept beside table (its "_leases" table, none if
// it does not exist: a store of a version without fleets) and the
// database's clock, in one read-only transaction.
func Leases(ctx context.Context, dsn, table string) (map[string]Lease, time.Time, error) {
	if !tableName.MatchString(table) || len(table) > 63 {
		return nil, time.Time{}, fmt.Errorf("table name %q: want [schema.]name of letters, digits and underscores", table)
	}
	tx, done, err := readOnly(ctx, dsn)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer done()
	parts := strings.Split(table, ".")
	parts[len(parts)-1] += "_leases"
	ident := pgx.Identifier(parts).Sanitize()
	var now time.Time
	var found *string
	if err := tx.QueryRow(ctx, `SELECT now(), to_regclass($1)::text`, ident).Scan(&now, &found); err != nil {
		return nil, time.Time{}, fmt.Errorf("PostgreSQL: look up the leases of table %s: %w", table, err)
	}
	leases := map[string]Lease{}
	if found == nil {
		return leases, now, nil
	}
	rows, err := tx.Query(ctx, `SELECT owner, expires_at, last_seen FROM `+ident)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("PostgreSQL: read the leases of table %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var owner string
		var l Lease
		if err := rows.Scan(&owner, &l.ExpiresAt, &l.LastSeen); err != nil {
			return nil, time.Time{}, fmt.Errorf("PostgreSQL: read the leases of table %s: %w", table, err)
		}
		leases[owner] = l
	}
	return leases, now, rows.Err()
}
