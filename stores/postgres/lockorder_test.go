package postgres

import (
	"context"
	"encoding/json"
	"errors"
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

// The tests of this file interleave a heartbeat with appends that are
// half done: an append is AppendEach's own statements (the sessions'
// advisory locks, then the insert whose trigger locks each window row an
// event opens, resumes or ends) run in an explicit transaction on a
// connection of its own, left open while the heartbeat runs. Whether the
// heartbeat waits behind it is read from the server (pg_blocking_pids),
// never guessed from time.

// openAppend begins an append of events on a connection of its own, as
// AppendEach does it, and leaves its transaction open; it returns the
// transaction and its backend's pid.
func openAppend(t *testing.T, s *Store, events ...watchdog.Event) (pgx.Tx, uint32) {
	t.Helper()
	ctx := context.Background()
	testPool(t) // skips without a server
	conn, err := pgx.Connect(ctx, os.Getenv(envDSN))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	lockAndInsert(t, s, tx, events...)
	return tx, conn.PgConn().PID()
}

// lockAndInsert runs AppendEach's lock and insert statements for events in
// tx.
func lockAndInsert(t *testing.T, s *Store, tx pgx.Tx, events ...watchdog.Event) {
	t.Helper()
	_, err := insertEach(s, tx, events...)
	require.NoError(t, err)
}

func insertEach(s *Store, tx pgx.Tx, events ...watchdog.Event) (pgconn.CommandTag, error) {
	ctx := context.Background()
	var (
		ids, aggs, kinds, payloads, owners []string
		windows                            []int32
		terminal, opens                    []bool
		keys                               []int64
	)
	for _, e := range events {
		b, err := encode(e)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		ids, aggs, kinds = append(ids, e.ID), append(aggs, e.AggregateID), append(kinds, e.Kind)
		windows, terminal, opens = append(windows, int32(e.Window)), append(terminal, e.Terminal()), append(opens, e.OpensWindow)
		payloads, owners = append(payloads, b), append(owners, e.Owner)
		keys = append(keys, lockKey("append", s.cfg.table, e.AggregateID))
	}
	if _, err := tx.Exec(ctx, s.n.lockEach, keys); err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, s.n.insertEach, ids, aggs, kinds, windows, terminal, opens, owners, payloads)
}

// heartbeatWaits runs Heartbeat and reports whether it waited behind one
// of the backends pids (true, with the heartbeat still running: done
// delivers its result later) or returned without waiting (false, and its
// error). The server is asked, back to back, whether any backend is
// blocked by one of pids, until the heartbeat returns; a heartbeat that
// does neither within 30 s fails the test.
func heartbeatWaits(t *testing.T, admin *pgxpool.Pool, hb func() error, pids ...uint32) (waited bool, done <-chan error, err error) {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- hb() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	blockers := make([]int32, len(pids))
	for i, p := range pids {
		blockers[i] = int32(p)
	}
	for {
		select {
		case err := <-ch:
			return false, nil, err
		default:
		}
		var blocked bool
		qerr := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::integer[])`, blockers).Scan(&blocked)
		if ctx.Err() != nil {
			t.Fatalf("the heartbeat neither returned nor waited behind the open appends within 30 s")
		}
		require.NoError(t, qerr)
		if blocked {
			return true, ch, nil
		}
	}
}

func openedBy(id, agg, owner string) watchdog.Event {
	e := ev(id, agg, watchdog.KindStart, 1)
	e.OpensWindow, e.Owner = true, owner
	return e
}

func endedBy(id, agg, owner string) watchdog.Event {
	e := ev(id, agg, watchdog.KindStop, 1)
	e.Owner = owner
	return e
}

// evidenceOf reads the checkpoint kept on agg's window 1 (nil if none).
func evidenceOf(t *testing.T, s *Store, agg string) []watchdog.EvidenceEntry {
	t.Helper()
	var raw []byte
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT evidence FROM `+s.n.windows+` WHERE aggregate_id = $1 AND window_number = 1`, agg).Scan(&raw))
	if raw == nil {
		return nil
	}
	var ev []watchdog.EvidenceEntry
	require.NoError(t, json.Unmarshal(raw, &ev))
	return ev
}

func checkpointOf(agg string, counter uint64) watchdog.Checkpoint {
	return watchdog.Checkpoint{SessionID: agg, Window: 1, Evidence: []watchdog.EvidenceEntry{{Channel: "stdout", Counter: counter}}}
}

// A heartbeat does not wait behind appends that hold its windows' rows
// (one that will fail and roll back, one that ends its window): the lease
// is renewed, and visible to every other member, while they are open; the
// checkpoints of the windows they hold are kept by the next heartbeat when
// the window is still the owner's (the failed append), and dropped when it
// ended.
func TestAHeartbeatDoesNotWaitBehindAppends(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	s := newStore(t, pool, WithTable(uniqueTable(t)))
	require.NoError(t, s.Append(ctx, openedBy("o1", "free", "a"), openedBy("o2", "failing", "a"), openedBy("o3", "ending", "a")))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Second, nil))

	failing, failingPID := openAppend(t, s, endedBy("e2", "failing", "a"))
	ending, endingPID := openAppend(t, s, endedBy("e3", "ending", "a"))
	cps := []watchdog.Checkpoint{checkpointOf("free", 1), checkpointOf("failing", 2), checkpointOf("ending", 3)}
	waited, done, err := heartbeatWaits(t, pool, func() error { return s.Heartbeat(ctx, "a", time.Hour, cps) }, failingPID, endingPID)
	if waited {
		_ = failing.Rollback(ctx)
		_ = ending.Rollback(ctx)
		testwait.For(t, done, "the heartbeat to return once the appends rolled back")
		t.Fatal("the heartbeat waited behind the appends that hold its windows' rows")
	}
	require.NoError(t, err)
	var renewed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT expires_at > now() + interval '50 minutes' FROM `+s.n.leases+` WHERE owner = 'a'`).Scan(&renewed))
	assert.True(t, renewed, "the lease is renewed, and committed, while the appends are open")
	assert.Equal(t, cps[0].Evidence, evidenceOf(t, s, "free"))
	assert.Nil(t, evidenceOf(t, s, "failing"), "its row is held by an append")
	assert.Nil(t, evidenceOf(t, s, "ending"), "its row is held by an append")

	require.NoError(t, failing.Rollback(ctx))
	require.NoError(t, ending.Commit(ctx))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Hour, nil))
	assert.Equal(t, cps[1].Evidence, evidenceOf(t, s, "failing"), "kept by the next heartbeat: the window is still a's")
	assert.Nil(t, evidenceOf(t, s, "ending"), "dropped: the window ended")
	s.deferMu.Lock()
	assert.Empty(t, s.deferred, "nothing left for later")
	s.deferMu.Unlock()
}

// A newer checkpoint of a window replaces the one a heartbeat could not
// keep, and Release forgets what its owner left.
func TestADeferredCheckpointYieldsToANewerOne(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	s := newStore(t, pool, WithTable(uniqueTable(t)))
	require.NoError(t, s.Append(ctx, openedBy("o1", "busy", "a")))
	held, pid := openAppend(t, s, endedBy("e1", "busy", "a"))
	waited, done, err := heartbeatWaits(t, pool, func() error {
		return s.Heartbeat(ctx, "a", time.Minute, []watchdog.Checkpoint{checkpointOf("busy", 1)})
	}, pid)
	if waited {
		_ = held.Rollback(ctx)
		testwait.For(t, done, "the heartbeat to return once the transaction rolled back")
		t.Fatal("the heartbeat waited behind the append that holds its window's row")
	}
	require.NoError(t, err)
	require.NoError(t, held.Rollback(ctx))
	newer := checkpointOf("busy", 2)
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, []watchdog.Checkpoint{newer}))
	assert.Equal(t, newer.Evidence, evidenceOf(t, s, "busy"))

	held, pid = openAppend(t, s, endedBy("e2", "busy", "a"))
	waited, done, err = heartbeatWaits(t, pool, func() error {
		return s.Heartbeat(ctx, "a", time.Minute, []watchdog.Checkpoint{checkpointOf("busy", 3)})
	}, pid)
	if waited {
		_ = held.Rollback(ctx)
		testwait.For(t, done, "the heartbeat to return once the transaction rolled back")
		t.Fatal("the heartbeat waited behind the append that holds its window's row")
	}
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "a"))
	require.NoError(t, held.Rollback(ctx))
	s.deferMu.Lock()
	assert.Empty(t, s.deferred, "Release forgets the owner's deferred checkpoints")
	s.deferMu.Unlock()
}

// The deadlock of the soaks: an append ends two windows, its trigger
// locking the second's row, then the first's; between the two, a
// heartbeat that checkpoints both locks the first's row and waits for the
// second's. Neither may fail with a deadlock (SQLSTATE 40P01), and the
// heartbeat may not wait.
func TestHeartbeatsAndAppendsDoNotDeadlock(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	s := newStore(t, pool, WithTable(uniqueTable(t)))
	require.NoError(t, s.Append(ctx, openedBy("o1", "first", "a")))
	require.NoError(t, s.Append(ctx, openedBy("o2", "second", "a")))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, nil))

	tx, pid := openAppend(t, s, endedBy("e2", "second", "a"))
	cps := []watchdog.Checkpoint{checkpointOf("first", 1), checkpointOf("second", 2)}
	waited, done, hbErr := heartbeatWaits(t, pool, func() error { return s.Heartbeat(ctx, "a", time.Minute, cps) }, pid)
	// The append goes on with the first window (before the fix, this
	// closed the cycle and the server broke it after deadlock_timeout).
	_, appendErr := insertEach(s, tx, endedBy("e1", "first", "a"))
	if appendErr == nil {
		appendErr = tx.Commit(ctx)
	} else {
		_ = tx.Rollback(ctx)
	}
	if waited {
		hbErr = testwait.For(t, done, "the heartbeat to return once the append ended")
	}
	var pgErr *pgconn.PgError
	for what, err := range map[string]error{"the append": appendErr, "the heartbeat": hbErr} {
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("%s deadlocked: %v", what, err)
		} else {
			assert.NoError(t, err, what)
		}
	}
	assert.False(t, waited, "the heartbeat waited behind the append")
}

// A heartbeat does not wait for a connection of the pool: under load every
// one of them is busy with appends and loads (here the pool's only one is
// held), and the heartbeat runs on the Store's lease connection; so do the
// reads a Watchdog makes after it (the database's clock, the windows it
// still holds).
func TestAHeartbeatDoesNotWaitForTheBusyPool(t *testing.T) {
	ctx := context.Background()
	testPool(t) // skips without a server
	cfg, err := pgxpool.ParseConfig(os.Getenv(envDSN))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool, WithTable(uniqueTable(t)))
	busy, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer busy.Release()

	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.Heartbeat(hctx, "a", time.Minute, nil), "the heartbeat waited for the pool's only connection, which an append holds")
	now, err := s.Now(hctx)
	require.NoError(t, err, "the clock's read waited for the pool")
	assert.False(t, now.IsZero())
	held, err := s.Held(hctx, "a")
	require.NoError(t, err, "Held waited for the pool")
	assert.Empty(t, held)
	var alive bool
	require.NoError(t, busy.QueryRow(ctx, `SELECT expires_at > now() FROM `+s.n.leases+` WHERE owner = 'a'`).Scan(&alive))
	assert.True(t, alive)
}

// The lease connection is the pool's kind: made through the pool's
// AfterConnect hook (here, the search_path that finds the unqualified
// table), and made again, within the same heartbeat, when the server ended
// it while it was idle.
func TestTheLeaseConnectionIsThePoolsKindAndComesBack(t *testing.T) {
	ctx := context.Background()
	admin := testPool(t)
	schema := uniqueTable(t)
	_, err := admin.Exec(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	cfg, err := pgxpool.ParseConfig(os.Getenv(envDSN))
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SET search_path = `+schema)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool, WithTable("events"))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, nil))

	var ended bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT bool_and(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE application_name = $1`, s.leaseName).Scan(&ended))
	require.True(t, ended, "the lease connection was there, and the server ended it")
	require.NoError(t, s.Heartbeat(ctx, "a", time.Hour, nil), "a new connection, in the same heartbeat")
	var renewed bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT expires_at > now() + interval '50 minutes' FROM `+schema+`.events_leases WHERE owner = 'a'`).Scan(&renewed))
	assert.True(t, renewed)
}
