package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/live"
)

// BenchmarkLiveList is the live list over 10,000 open windows: ReadLive
// (on an open connection: a refresh of "sessionwatchdog top --dsn") beside
// a plain SELECT of the same rows of the windows table, with the database's
// own time for each (EXPLAIN ANALYZE's execution time, db-ms) and the
// bytes the owners' heartbeats keep per window (ckpt-bytes). The windows
// are opened by a Watchdog on the store, each with evidence on stdout and
// one in ten with a call in flight, and checkpointed by its heartbeats;
// then it closes, leaving them open. The table stays, named in the log, for
// timing the command on it:
//
//	../../scripts/with-postgres go test -run '^$' -bench LiveList -benchtime 20x -v
func BenchmarkLiveList(b *testing.B) {
	const n = 10_000
	pool := testPool(b)
	ctx := context.Background()
	table := os.Getenv("WATCHDOG_LIVE_TABLE") // an earlier run's
	if table == "" {
		table = uniqueTable(b)
		openWindows(b, pool, table, n)
	}
	b.Logf("table %s", table)
	nm := newNames(table)
	var ckptBytes float64
	if err := pool.QueryRow(ctx, `SELECT avg(octet_length(evidence::text) + coalesce(octet_length(live::text), 0)) FROM `+nm.windows+` WHERE open`).Scan(&ckptBytes); err != nil {
		b.Fatal(err)
	}
	plain := `SELECT aggregate_id, window_number, owner, evidence, live, checkpoint_at FROM ` + nm.windows + ` WHERE open`
	for _, c := range []struct {
		name, explain string
		args          []any
		read          func(ctx context.Context, conn *pgx.Conn) (int, error)
	}{
		{"ReadLive", liveQuery(&nm), []any{nil, nil}, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			l, err := ReadLive(ctx, conn, table, live.Filter{})
			return len(l.Rows), err
		}},
		{"plain-select", plain, nil, func(ctx context.Context, conn *pgx.Conn) (int, error) {
			rows, err := conn.Query(ctx, plain)
			if err != nil {
				return 0, err
			}
			k := 0
			for rows.Next() {
				var agg, owner string
				var w int32
				var ev, lv []byte
				var at *time.Time
				if err := rows.Scan(&agg, &w, &owner, &ev, &lv, &at); err != nil {
					return 0, err
				}
				k++
			}
			return k, rows.Err()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			var plan []struct {
				ExecutionTime float64 `json:"Execution Time"`
			}
			var raw []byte
			tx, err := conn.Begin(ctx) // as ReadLive runs it
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
				b.Fatal(err)
			}
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "+c.explain, c.args...).Scan(&raw); err != nil {
				b.Fatal(err)
			}
			if os.Getenv("WATCHDOG_LIVE_PLAN") != "" {
				rows, _ := tx.Query(ctx, "EXPLAIN (ANALYZE) "+c.explain, c.args...)
				for rows.Next() {
					var line string
					_ = rows.Scan(&line)
					b.Log(line)
				}
				rows.Close()
			}
			_ = tx.Rollback(ctx)
			if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
				b.Fatalf("plan %s: %v", raw, err)
			}
			for b.Loop() {
				k, err := c.read(ctx, conn.Conn())
				if err != nil || k != n {
					b.Fatalf("%d rows, %v", k, err)
				}
			}
			b.ReportMetric(plan[0].ExecutionTime, "db-ms")
			b.ReportMetric(ckptBytes, "ckpt-bytes")
		})
	}
}

// openWindows opens n windows on table through a Watchdog, each with
// evidence on stdout and one in ten with a call in flight, waits until its
// heartbeats have checkpointed them all, and closes it (the windows stay
// open).
func openWindows(b *testing.B, pool *pgxpool.Pool, table string, n int) {
	ctx := context.Background()
	store := newStore(b, pool, WithTable(table))
	w := watchdog.New(watchdog.WithStore(store)) // the default lease: a heartbeat every 2 s
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < n; i += 64 {
				s, err := w.Start(ctx, fmt.Sprintf("agent-%05d", i), time.Now(), watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				s.Touch(watchdog.ChannelStdout)
				if i%10 == 0 {
					if _, err := watchdog.Begin(s.Context(), "Bash", watchdog.CallLimits{Cap: time.Hour}); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	nm := newNames(table)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var kept int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+nm.windows+` WHERE open AND checkpoint_at IS NOT NULL`).Scan(&kept); err != nil {
			b.Fatal(err)
		}
		if kept == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d windows checkpointed after a minute", kept, n)
		}
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{nm.table, nm.windows, nm.leases} { // as autovacuum does after so many writes
		if _, err := pool.Exec(ctx, "ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
}
