package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/live"
)

// The fleet's schema, beside the events table (see Migrate): who owns each
// window, and each owner's lease. Triggers on the events table keep the
// windows table and fence writes, so that every writer, the Store or not,
// is held to the same rules:
//
//	CREATE TABLE watchdog_events_windows (
//		aggregate_id  text NOT NULL,
//		window_number integer NOT NULL,
//		owner         text NOT NULL,
//		open          boolean NOT NULL DEFAULT true,
//		claimed_at    timestamptz NOT NULL DEFAULT now(),
//		evidence      json,  -- the owner's last checkpoint ([]watchdog.EvidenceEntry)
//		checkpoint_at timestamptz, -- when it kept it (see liveSchema, ReadLive)
//		live          json,  -- the rest of it: start, deadline, freshest channel, calls, earliest stop
//		PRIMARY KEY (aggregate_id, window_number));
//	CREATE TABLE watchdog_events_leases (
//		owner      text PRIMARY KEY,
//		expires_at timestamptz NOT NULL,
//		last_seen  timestamptz NOT NULL);
//
// An event with an owner (every event of this version) that opens a window,
// or resumes one, makes its owner the window's; a terminal event closes it.
// An event of a window another owner holds is refused (SQLSTATE WD001),
// except a resume when that owner's lease has expired or was released: the
// resume takes the window over. Events without an owner (earlier versions)
// pass unchecked and are not tracked.
func fleetSchema(n *names) []string {
	const resume = "'" + watchdog.KindResume + "'"
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + n.windows + ` (
	aggregate_id  text NOT NULL,
	window_number integer NOT NULL,
	owner         text NOT NULL,
	open          boolean NOT NULL DEFAULT true,
	claimed_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (aggregate_id, window_number))`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{n.base + "_windows_owner"}.Sanitize() + ` ON ` + n.windows + ` (owner) WHERE open`,
		`ALTER TABLE ` + n.windows + ` ADD COLUMN IF NOT EXISTS evidence json`,
		`CREATE TABLE IF NOT EXISTS ` + n.leases + ` (
	owner      text PRIMARY KEY,
	expires_at timestamptz NOT NULL,
	last_seen  timestamptz NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{n.base + "_leases_expiry"}.Sanitize() + ` ON ` + n.leases + ` (expires_at)`,
		`ALTER TABLE ` + n.table + ` ADD COLUMN IF NOT EXISTS owner text`,
		`CREATE OR REPLACE FUNCTION ` + n.fenceFn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE cur text;
BEGIN
	IF NEW.owner IS NULL THEN RETURN NEW; END IF;
	SELECT owner INTO cur FROM ` + n.windows + ` WHERE aggregate_id = NEW.aggregate_id AND window_number = NEW.window_number;
	IF NOT FOUND OR cur = NEW.owner THEN RETURN NEW; END IF;
	IF NEW.event_kind = ` + resume + ` AND NOT NEW.opens
		AND NOT EXISTS (SELECT 1 FROM ` + n.leases + ` WHERE owner = cur AND expires_at >= now()) THEN
		RETURN NEW; -- takes over a window whose owner's lease is gone
	END IF;
	RAISE EXCEPTION 'session % window % is owned by %', NEW.aggregate_id, NEW.window_number, cur USING ERRCODE = 'WD001';
END $f$`,
		`CREATE OR REPLACE FUNCTION ` + n.trackFn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF NEW.owner IS NULL THEN RETURN NULL; END IF;
	IF NEW.opens OR NEW.event_kind = ` + resume + ` THEN
		INSERT INTO ` + n.windows + ` AS w (aggregate_id, window_number, owner) VALUES (NEW.aggregate_id, NEW.window_number, NEW.owner)
		ON CONFLICT (aggregate_id, window_number) DO UPDATE SET owner = EXCLUDED.owner, claimed_at = now() WHERE w.owner <> EXCLUDED.owner;
	ELSIF NEW.terminal THEN
		UPDATE ` + n.windows + ` SET open = false WHERE aggregate_id = NEW.aggregate_id AND window_number = NEW.window_number AND open;
	END IF;
	RETURN NULL;
END $f$`,
		`DROP TRIGGER IF EXISTS ` + pgx.Identifier{n.base + "_fence"}.Sanitize() + ` ON ` + n.table,
		`CREATE TRIGGER ` + pgx.Identifier{n.base + "_fence"}.Sanitize() + ` BEFORE INSERT ON ` + n.table + ` FOR EACH ROW EXECUTE FUNCTION ` + n.fenceFn + `()`,
		`DROP TRIGGER IF EXISTS ` + pgx.Identifier{n.base + "_track"}.Sanitize() + ` ON ` + n.table,
		`CREATE TRIGGER ` + pgx.Identifier{n.base + "_track"}.Sanitize() + ` AFTER INSERT ON ` + n.table + ` FOR EACH ROW EXECUTE FUNCTION ` + n.trackFn + `()`,
	}
}

// fenced reports whether SQLSTATE code is the fence's: another owner holds
// the event's window.
func fenced(code string) bool { return code == "WD001" }

func fencedErr(e watchdog.Event, err error) error {
	msg := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg = pgErr.Message
	}
	return fmt.Errorf("%w: event %s of owner %q refused: %s", watchdog.ErrAlreadyWatched, e.ID, e.Owner, msg)
}

// ckptRow is a checkpoint as the windows table keeps it: the evidence's
// JSON and the live column's (see liveJSON).
type ckptRow struct{ evidence, live string }

// windowKey names a session window.
type windowKey struct {
	agg string
	n   int32
}

// Heartbeat implements watchdog.Leaser in one round trip and one
// transaction: owner's lease runs until ttl from now, on the database's
// clock, and each checkpoint is kept on its window, if owner holds it.
//
// A heartbeat never waits behind an append or an adoption, so it cannot
// deadlock with them, and a busy store does not delay the lease. It runs
// on a connection of its own, not the pool's: under load the pool's
// connections are all busy with appends and loads, and a heartbeat that
// waited for one missed its turn. The lease is owner's own row, which no
// append locks (the fence only reads it), and the checkpoints lock their
// windows' rows with SKIP LOCKED: the append trigger holds a window's row
// from its insert to its commit when an event opens, resumes or ends the
// window, as Adopt holds the rows it hands over, and the heartbeat's
// update, waiting there while holding the rows it had already locked, was
// the other half of a deadlock (its rows in the plan's order, the
// trigger's in the batch's). A checkpoint whose window row is locked is
// not lost: the Store keeps it, and owner's next heartbeat writes it
// (under a newer checkpoint of the same window, if one comes), unless the
// window has meanwhile ended or changed owner. So does a heartbeat that
// fails.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration, checkpoints []watchdog.Checkpoint) error {
	if s.isClosed() {
		return s.closedErr()
	}
	if owner == "" || ttl <= 0 {
		return fmt.Errorf("%w: postgres store: heartbeat of owner %q for %v", watchdog.ErrInvalidArgument, owner, ttl)
	}
	cps := make(map[windowKey]ckptRow, len(checkpoints))
	for _, c := range checkpoints {
		raw, err := json.Marshal(c.Evidence)
		if err != nil {
			return fmt.Errorf("%w: postgres store: checkpoint of %q: %v", watchdog.ErrInvalidArgument, c.SessionID, err)
		}
		fresh, freshAt := live.Freshest(c.Evidence)
		lv, _ := json.Marshal(liveJSON{WindowStartedAt: c.WindowStartedAt.UTC(), Deadline: c.Deadline.UTC(), Freshest: fresh, FreshestAt: freshAt.UTC(),
			CallsInFlight: c.CallsInFlight, OldestCall: c.OldestCall, StopAt: c.StopAt.UTC(), StopRule: c.StopRule})
		cps[windowKey{c.SessionID, int32(c.Window)}] = ckptRow{string(raw), string(lv)}
	}
	s.deferMu.Lock()
	for k, e := range s.deferred[owner] {
		if _, newer := cps[k]; !newer {
			cps[k] = e
		}
	}
	delete(s.deferred, owner)
	s.deferMu.Unlock()

	lease := `INSERT INTO ` + s.n.leases + ` (owner, expires_at, last_seen)
VALUES ($1, now() + make_interval(secs => $2), now())
ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, last_seen = EXCLUDED.last_seen`
	var keep string
	var keepArgs []any
	keys := make([]windowKey, 0, len(cps))
	if len(cps) > 0 {
		for k := range cps {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(x, y windowKey) int {
			if c := strings.Compare(x.agg, y.agg); c != 0 {
				return c
			}
			return int(x.n) - int(y.n)
		})
		aggs, evs, lvs := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
		windows := make([]int32, len(keys))
		for i, k := range keys {
			aggs[i], windows[i], evs[i], lvs[i] = k.agg, k.n, cps[k].evidence, cps[k].live
		}
		// Returns the checkpoints of windows owner held at the statement's
		// start that it could not keep (their row was locked). The batch
		// then notifies LiveChannel, in the same transaction (see ReadLive).
		keep, keepArgs = `WITH c AS (SELECT * FROM unnest($1::text[], $2::integer[], $3::text[], $5::text[]) AS c(a, n, e, l)),
mine AS (SELECT w.aggregate_id AS a, w.window_number AS n, c.e, c.l FROM `+s.n.windows+` w
	JOIN c ON w.aggregate_id = c.a AND w.window_number = c.n
	WHERE w.owner = $4 AND w.open
	FOR UPDATE OF w SKIP LOCKED),
kept AS (UPDATE `+s.n.windows+` w SET evidence = mine.e::json, live = mine.l::json, checkpoint_at = now() FROM mine
	WHERE w.aggregate_id = mine.a AND w.window_number = mine.n
	RETURNING w.aggregate_id, w.window_number)
SELECT c.a, c.n FROM c JOIN `+s.n.windows+` w ON w.aggregate_id = c.a AND w.window_number = c.n
WHERE w.owner = $4 AND w.open
	AND NOT EXISTS (SELECT 1 FROM kept k WHERE k.aggregate_id = c.a AND k.window_number = c.n)`,
			[]any{aggs, windows, evs, owner, lvs}
	}
	var later []windowKey
	err := s.onLeaseConn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		later = nil
		b := &pgx.Batch{}
		b.Queue(lease, owner, ttl.Seconds())
		if keep != "" {
			b.Queue(keep, keepArgs...)
			b.Queue(`SELECT pg_notify($1, $2)`, LiveChannel(s.cfg.table), owner)
		}
		br := conn.SendBatch(ctx, b)
		_, err := br.Exec()
		if err == nil && keep != "" {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				later, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (windowKey, error) {
					var k windowKey
					return k, r.Scan(&k.agg, &k.n)
				})
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		later = keys
	}
	if len(later) > 0 {
		s.deferMu.Lock()
		if s.deferred == nil {
			s.deferred = make(map[string]map[windowKey]ckptRow)
		}
		m := s.deferred[owner]
		if m == nil {
			m = make(map[windowKey]ckptRow, len(later))
			s.deferred[owner] = m
		}
		for _, k := range later {
			if _, newer := m[k]; !newer { // a concurrent heartbeat's
				m[k] = cps[k]
			}
		}
		s.deferMu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("postgres store: heartbeat of %s: %w", owner, err)
	}
	return nil
}

// Now reads the database's clock, the one leases expire on: a Watchdog
// reads it at each heartbeat and records every instant on it, so that the
// members of a fleet whose clocks disagree record, and decide an adopted
// window, alike (see watchdog.Leaser). It runs on the heartbeat's own
// connection, so that the pool's being busy never delays it (see
// Heartbeat).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if s.isClosed() {
		return time.Time{}, s.closedErr()
	}
	var now time.Time
	if err := s.onLeaseConn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT now()`).Scan(&now)
	}); err != nil {
		return time.Time{}, fmt.Errorf("postgres store: now: %w", err)
	}
	return now, nil
}

// Held returns the open windows owner holds (their Evidence left empty):
// an owner whose lease lapsed asks it once renewed, and stops watching the
// windows another owner took over meanwhile (see watchdog.Leaser). It
// runs on the heartbeat's own connection, as Now does.
func (s *Store) Held(ctx context.Context, owner string) ([]watchdog.Checkpoint, error) {
	if s.isClosed() {
		return nil, s.closedErr()
	}
	var held []watchdog.Checkpoint
	err := s.onLeaseConn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT aggregate_id, window_number FROM `+s.n.windows+` WHERE owner = $1 AND open`, owner)
		if err != nil {
			return err
		}
		held, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (c watchdog.Checkpoint, err error) {
			var n int32
			err = r.Scan(&c.SessionID, &n)
			c.Window = int(n)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: held by %s: %w", owner, err)
	}
	return held, nil
}

// Release implements watchdog.Leaser: owner's lease ends now (its row stays,
// with its last heartbeat, for the adopters' records).
func (s *Store) Release(ctx context.Context, owner string) error {
	if s.isClosed() {
		return s.closedErr()
	}
	s.deferMu.Lock()
	delete(s.deferred, owner) // its windows are an adopter's now
	s.deferMu.Unlock()
	_, err := s.pool.Exec(ctx, `UPDATE `+s.n.leases+` SET expires_at = now() - interval '1 microsecond' WHERE owner = $1`, owner)
	if err != nil {
		return fmt.Errorf("postgres store: release of %s: %w", owner, err)
	}
	return nil
}

// Adopt implements watchdog.Leaser in one transaction: it picks up to limit
// open windows whose owner's lease has expired (on the database's clock),
// takes the advisory lock of each one's session (skipping those another
// transaction holds: an append or another adopter), and makes adopter their
// owner where the owner's lease is still expired. Leases expired for a day
// that own no open window are deleted on the way.
func (s *Store) Adopt(ctx context.Context, adopter string, limit int) ([]watchdog.Orphan, error) {
	if s.isClosed() {
		return nil, s.closedErr()
	}
	if adopter == "" || limit <= 0 {
		return nil, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres store: adopt: %w", err)
	}
	defer tx.Rollback(ctx) // a cancelled ctx closes the connection, which rolls back
	rows, err := tx.Query(ctx, `SELECT w.aggregate_id, w.window_number, w.owner, l.last_seen, w.evidence
FROM `+s.n.leases+` l JOIN `+s.n.windows+` w ON w.owner = l.owner AND w.open
WHERE l.expires_at < now() AND l.owner <> $1
ORDER BY w.claimed_at LIMIT $2`, adopter, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres store: adopt: %w", err)
	}
	type cand struct {
		o   watchdog.Orphan
		key int64
	}
	var cands []cand
	for rows.Next() {
		var c cand
		var w int32
		var ev []byte
		if err := rows.Scan(&c.o.SessionID, &w, &c.o.Owner, &c.o.LastSeen, &ev); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres store: adopt: %w", err)
		}
		if len(ev) > 0 && json.Unmarshal(ev, &c.o.Evidence) != nil {
			c.o.Evidence = nil // an unreadable checkpoint: the evidence rules start again
		}
		c.o.Window = int(w)
		c.key = lockKey("append", s.cfg.table, c.o.SessionID)
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres store: adopt: %w", err)
	}
	var orphans []watchdog.Orphan
	if len(cands) > 0 {
		keys := make([]int64, len(cands))
		for i, c := range cands {
			keys[i] = c.key
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		rows, err := tx.Query(ctx, `SELECT k FROM unnest($1::bigint[]) AS u(k) WHERE pg_try_advisory_xact_lock(k)`, keys)
		if err != nil {
			return nil, fmt.Errorf("postgres store: adopt: %w", err)
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("postgres store: adopt: %w", err)
		}
		var aggs, owners []string
		var windows []int32
		for _, c := range cands {
			if slices.Contains(locked, c.key) {
				aggs, owners, windows = append(aggs, c.o.SessionID), append(owners, c.o.Owner), append(windows, int32(c.o.Window))
			}
		}
		rows, err = tx.Query(ctx, `UPDATE `+s.n.windows+` w SET owner = $1, claimed_at = now()
FROM unnest($2::text[], $3::integer[], $4::text[]) AS c(a, n, o)
WHERE w.aggregate_id = c.a AND w.window_number = c.n AND w.owner = c.o AND w.open
	AND NOT EXISTS (SELECT 1 FROM `+s.n.leases+` l WHERE l.owner = c.o AND l.expires_at >= now())
RETURNING w.aggregate_id, w.window_number`, adopter, aggs, windows, owners)
		if err != nil {
			return nil, fmt.Errorf("postgres store: adopt: %w", err)
		}
		type won struct {
			a string
			n int32
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (won, error) {
			var x won
			return x, r.Scan(&x.a, &x.n)
		})
		if err != nil {
			return nil, fmt.Errorf("postgres store: adopt: %w", err)
		}
		for _, c := range cands {
			if slices.Contains(got, won{c.o.SessionID, int32(c.o.Window)}) {
				orphans = append(orphans, c.o)
			}
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+s.n.leases+` l WHERE l.expires_at < now() - interval '1 day'
	AND NOT EXISTS (SELECT 1 FROM `+s.n.windows+` w WHERE w.owner = l.owner AND w.open)`); err != nil {
		return nil, fmt.Errorf("postgres store: adopt: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres store: adopt: %w", err)
	}
	return orphans, nil
}
