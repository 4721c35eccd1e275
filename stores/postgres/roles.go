package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WithoutMigration makes New open the store without creating or changing
// any part of the schema (no DDL): for a fleet member whose role may only
// read and write the rows, while a migrating role that owns the tables runs
// Migrate once per release (see docs/stopping.md for the three roles and
// their grants). New then checks that the events, windows, leases and
// stops tables exist, and fails naming the first missing one. Default: New
// migrates.
func WithoutMigration() Option { return func(c *config) { c.noMigrate = true } }

// checkSchema reports the first of table's tables that does not exist.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, table string) error {
	n := newNames(table)
	sn := newStopNames(&n)
	for _, t := range []string{n.table, n.windows, n.leases, sn.table} {
		var found bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&found); err != nil {
			return fmt.Errorf("postgres store: check the schema of %s: %w", table, err)
		}
		if !found {
			return fmt.Errorf("postgres store: table %s does not exist (or this role cannot see it): run Migrate as the role that owns the schema first (WithoutMigration opens the store without DDL)", t)
		}
	}
	return nil
}
