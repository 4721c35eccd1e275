package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog"
)

// Remote stop: the stops table (default "watchdog_events_stops") holds the
// requests to stop a session, one row each, made by anyone with INSERT on
// its aggregate_id and why columns (RequestStop; "sessionwatchdog stop").
// A BEFORE INSERT trigger fills in the rest, whatever the requester sent:
// requested_by is session_user, the role PostgreSQL authenticated;
// requested_at is the database's now(); window_number and owner are the
// session's latest window and its owner, from the windows table. A request
// for a session no fleet member opened is answered at once (state
// "unknown"), one whose latest window has ended too ("ended"). Any other is
// "pending" until the window's owner answers it (ServeStops): "stopped"
// when it ended the window, as Session.StopBy(requested_by, why) does, or
// "ended" when the window had ended before. The owner reads the request
// rows: a notification on the stops channel only wakes it, and its payload
// is never read.
//
//	CREATE TABLE watchdog_events_stops (
//		id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//		aggregate_id  text NOT NULL CHECK (octet_length(aggregate_id) > 0),
//		why           text NOT NULL CHECK (octet_length(why) BETWEEN 1 AND 1024),
//		requested_by  text NOT NULL DEFAULT session_user,
//		requested_at  timestamptz NOT NULL DEFAULT now(),
//		window_number integer,
//		owner         text,
//		state         text NOT NULL DEFAULT 'pending',
//		answered_by   text,
//		answered_at   timestamptz,
//		detail        text);
func stopSchema(n *names) []string {
	sn := newStopNames(n)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + sn.table + ` (
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	aggregate_id  text NOT NULL CHECK (octet_length(aggregate_id) > 0),
	why           text NOT NULL CHECK (octet_length(why) BETWEEN 1 AND 1024),
	requested_by  text NOT NULL DEFAULT session_user,
	requested_at  timestamptz NOT NULL DEFAULT now(),
	window_number integer,
	owner         text,
	state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'stopped', 'ended', 'unknown', 'refused')),
	answered_by   text,
	answered_at   timestamptz,
	detail        text)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{n.base + "_stops_pending"}.Sanitize() + ` ON ` + sn.table + ` (aggregate_id, window_number) WHERE state = 'pending'`,
		`CREATE OR REPLACE FUNCTION ` + sn.fn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE w record; t record;
BEGIN
	NEW.requested_by := session_user;
	NEW.requested_at := now();
	NEW.state := 'pending';
	NEW.window_number := NULL; NEW.owner := NULL; NEW.answered_by := NULL; NEW.answered_at := NULL; NEW.detail := NULL;
	SELECT window_number, owner, open INTO w FROM ` + n.windows + ` WHERE aggregate_id = NEW.aggregate_id ORDER BY window_number DESC LIMIT 1;
	IF NOT FOUND THEN
		NEW.state := 'unknown'; NEW.answered_at := now();
		NEW.detail := 'no fleet member has opened a window of this session';
		RETURN NEW;
	END IF;
	NEW.window_number := w.window_number; NEW.owner := w.owner;
	IF NOT w.open THEN
		SELECT event_kind, event->>'reason' AS reason, event->>'by' AS stop_by, event->>'why' AS stop_why INTO t FROM ` + n.table + `
			WHERE aggregate_id = NEW.aggregate_id AND window_number = w.window_number AND terminal LIMIT 1;
		NEW.state := 'ended'; NEW.answered_at := now();
		NEW.detail := 'window ' || w.window_number || ' had already ended' || coalesce(': ' || t.event_kind || ' ' || coalesce(t.reason, ''), '')
			|| coalesce(' by ' || t.stop_by, '') || coalesce(' (' || t.stop_why || ')', '');
		RETURN NEW;
	END IF;
	PERFORM pg_notify('` + sn.channel + `', '');
	RETURN NEW;
END $f$`,
		`DROP TRIGGER IF EXISTS ` + pgx.Identifier{n.base + "_stop_request"}.Sanitize() + ` ON ` + sn.table,
		`CREATE TRIGGER ` + pgx.Identifier{n.base + "_stop_request"}.Sanitize() + ` BEFORE INSERT ON ` + sn.table + ` FOR EACH ROW EXECUTE FUNCTION ` + sn.fn + `()`,
	}
}

// stopNames are the SQL names of the stops table of an events table.
type stopNames struct {
	table   string // sanitized
	fn      string // the request trigger's function, sanitized
	channel string // raw: the owners listen on it
	answers string // raw: the requesters listen on it
}

func newStopNames(n *names) stopNames {
	qualify := func(name string) string {
		if schema, _, ok := strings.Cut(n.channel, "."); ok {
			return pgx.Identifier{schema, name}.Sanitize()
		}
		return pgx.Identifier{name}.Sanitize()
	}
	k := strconv.FormatUint(uint64(lockKey("stops", n.channel)), 16)
	return stopNames{
		table:   qualify(n.base + "_stops"),
		fn:      qualify(n.base + "_stop_request"),
		channel: "wd_stop_" + k,
		answers: "wd_stopped_" + k,
	}
}

// The states of a StopRequest.
const (
	// StopPending: the window's owner has not answered yet (its lease may
	// have expired: a fleet member WithAdoption adopts the window, then
	// answers).
	StopPending = "pending"
	// StopStopped: the owner ended the window, as Session.StopBy does.
	StopStopped = "stopped"
	// StopEnded: the window had ended before the owner could stop it (by
	// another stop request too: two requests record one stop); Detail
	// says how.
	StopEnded = "ended"
	// StopUnknown: no fleet member has opened a window of the session.
	StopUnknown = "unknown"
	// StopRefused: the owner cannot attribute the request or its why is
	// not one StopBy takes; Detail says why.
	StopRefused = "refused"
)

// StopRequest is a row of the stops table: a request to stop a session's
// window, and its answer once its owner gave one.
type StopRequest struct {
	// ID is the request's id, for WaitStop.
	ID int64
	// SessionID is the session to stop.
	SessionID string
	// Why is the requester's reason, recorded on the stop event.
	Why string
	// RequestedBy is the role PostgreSQL authenticated for the requester
	// (session_user): recorded as the stop event's By.
	RequestedBy string
	// RequestedAt is when it was requested, on the database's clock.
	RequestedAt time.Time
	// Window is the session's latest window when it was requested (0 if
	// it has none: StopUnknown).
	Window int
	// Owner is the owner of that window when it was requested.
	Owner string
	// OwnerLeaseExpired reports whether Owner's lease had expired (or was
	// released) when RequestStop returned: the owner is gone, and the
	// request waits for a member that adopts the window.
	OwnerLeaseExpired bool
	// State is one of the Stop states (StopPending ...).
	State string
	// AnsweredBy is the owner that answered (empty while pending, and for
	// StopUnknown and an ended window, which the database answers).
	AnsweredBy string
	// AnsweredAt is when it was answered, on the database's clock (zero
	// while pending).
	AnsweredAt time.Time
	// Detail says more about the answer, in words.
	Detail string
}

// Answered reports whether r has its answer (its State is not StopPending).
func (r StopRequest) Answered() bool { return r.State != StopPending }

const stopColumns = `id, aggregate_id, why, requested_by, requested_at, coalesce(window_number, 0), coalesce(owner, ''), state,
	coalesce(answered_by, ''), answered_at, coalesce(detail, '')`

func scanStop(row pgx.Row, r *StopRequest, extra ...any) error {
	var w int32
	var at *time.Time
	err := row.Scan(append([]any{&r.ID, &r.SessionID, &r.Why, &r.RequestedBy, &r.RequestedAt, &w, &r.Owner, &r.State,
		&r.AnsweredBy, &at, &r.Detail}, extra...)...)
	r.Window = int(w)
	if at != nil {
		r.AnsweredAt = *at
	}
	return err
}

// RequestStop asks the owner of session id's latest window, wherever it
// runs, to stop it for why (1 to 1,024 bytes), as the role pool's
// connections are authenticated as: PostgreSQL records that role, never a
// name the caller chooses. It needs only INSERT (aggregate_id, why) and
// SELECT on the stops table and SELECT on the windows, leases and events
// tables (see docs/stopping.md), and never changes the schema. It returns
// the request as recorded: answered at once for a session no fleet member
// opened (StopUnknown) and one whose latest window has ended (StopEnded),
// else StopPending; WaitStop waits for the answer. The options name the
// table (WithTable); others are ignored. Safe for concurrent use.
func RequestStop(ctx context.Context, pool *pgxpool.Pool, id, why string, opts ...Option) (StopRequest, error) {
	if pool == nil || ctx == nil {
		return StopRequest{}, fmt.Errorf("%w: postgres store: request stop: nil pool or context", watchdog.ErrInvalidArgument)
	}
	c, err := newConfig(opts)
	if err != nil {
		return StopRequest{}, err
	}
	if id == "" || len(why) == 0 || len(why) > 1024 {
		return StopRequest{}, fmt.Errorf("%w: postgres store: request stop of %q: want a session id and a why of 1 to 1,024 bytes (got %d)",
			watchdog.ErrInvalidArgument, id, len(why))
	}
	n := newNames(c.table)
	sn := newStopNames(&n)
	var r StopRequest
	err = scanStop(pool.QueryRow(ctx, `WITH r AS (INSERT INTO `+sn.table+` (aggregate_id, why) VALUES ($1, $2) RETURNING *)
SELECT `+stopColumns+`, r.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM `+n.leases+` l WHERE l.owner = r.owner AND l.expires_at >= now()) FROM r`,
		id, why), &r, &r.OwnerLeaseExpired)
	if err != nil {
		return StopRequest{}, fmt.Errorf("postgres store: request stop of %q: %w", id, err)
	}
	return r, nil
}

// WaitStop waits until stop request id has its answer and returns it, or
// returns the request as it last read it with ctx's error once ctx ends.
// A request whose window has ended, unanswered for a second (answerGrace)
// after (its owner may have closed first), is answered from the window's
// terminal event, though its row stays pending: StopStopped if that is a
// stop that names this request's requester and why, else StopEnded.
// It listens for the owners' answers on a connection of pool's while it
// waits, and reads the request again at least every 250 ms. The options
// name the table (WithTable). Safe for concurrent use.
func WaitStop(ctx context.Context, pool *pgxpool.Pool, id int64, opts ...Option) (StopRequest, error) {
	if pool == nil || ctx == nil {
		return StopRequest{}, fmt.Errorf("%w: postgres store: wait stop: nil pool or context", watchdog.ErrInvalidArgument)
	}
	c, err := newConfig(opts)
	if err != nil {
		return StopRequest{}, err
	}
	n := newNames(c.table)
	sn := newStopNames(&n)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return StopRequest{}, fmt.Errorf("postgres store: wait for stop request %d: %w", id, err)
	}
	defer func() {
		// Hijacked and closed: a connection that listened goes back to
		// no pool, and one a cancelled wait broke is not reused.
		closeConn(conn.Hijack())
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{sn.answers}.Sanitize()); err != nil {
		return StopRequest{}, fmt.Errorf("postgres store: wait for stop request %d: %w", id, err)
	}
	read := `SELECT ` + stopColumns + ` FROM ` + sn.table + ` WHERE id = $1`
	var r StopRequest
	var closedAt time.Time // when the window was first seen ended
	for {
		if err := scanStop(conn.QueryRow(ctx, read, id), &r); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return StopRequest{}, fmt.Errorf("postgres store: wait for stop request %d: no such request", id)
			}
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			return r, fmt.Errorf("postgres store: wait for stop request %d: %w", id, err)
		}
		if r.Answered() {
			return r, nil
		}
		// A window that ended meanwhile has its answer even if its owner
		// closed before it wrote one: after a grace for the owner's own
		// answer, it is read from the window's terminal event.
		var kind, reason, by, why string
		err := conn.QueryRow(ctx, `SELECT e.event_kind, coalesce(e.event->>'reason', ''), coalesce(e.event->>'by', ''), coalesce(e.event->>'why', '')
FROM `+n.windows+` w JOIN `+n.table+` e ON e.aggregate_id = w.aggregate_id AND e.window_number = w.window_number AND e.terminal
WHERE w.aggregate_id = $1 AND w.window_number = $2 AND NOT w.open`, r.SessionID, r.Window).Scan(&kind, &reason, &by, &why)
		switch {
		case err != nil:
		case closedAt.IsZero():
			closedAt = time.Now()
		case time.Since(closedAt) >= answerGrace:
			r.State, r.Detail = StopEnded, fmt.Sprintf("window %d had already ended: %s %s by %s (%s)", r.Window, kind, reason, by, why)
			if reason == watchdog.StopRequested && by == r.RequestedBy && why == r.Why {
				r.State, r.Detail = StopStopped, fmt.Sprintf("window %d stopped: its stop event names this requester and why (its owner wrote no answer)", r.Window)
			}
			return r, nil
		}
		wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		_, err = conn.Conn().WaitForNotification(wctx) // the pgx.Conn's: it holds those that came during a query
		cancel()
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if err != nil && !pgconn.Timeout(err) {
			return r, fmt.Errorf("postgres store: wait for stop request %d: %w", id, err)
		}
	}
}

// stopPoll is how often an owner reads its pending stop requests without
// a notification: a request whose notification it missed (its listener
// reconnected), or one made before it adopted the window.
const stopPoll = time.Second

// answerWithin bounds the write of an answer, which the end of ServeStops's
// context does not cut short.
const answerWithin = 5 * time.Second

// answerGrace is how long WaitStop waits for the owner's answer to a
// request whose window has ended before it reads the answer from the log.
const answerGrace = time.Second

// ServeStops implements watchdog.StopSource: until ctx ends or the Store
// closes, it answers the pending stop requests of the windows owner holds,
// calling stop for each, on a connection of its own that listens on the
// stops channel (made as the pool makes its own). It reads the requests
// when notified and every second (stopPoll), and never reads a
// notification's payload: a notification, whoever sent it, only makes it
// read the table. A request is answered StopStopped when stop ended the
// window, StopEnded when the window had ended (the other requests of a
// window one request stopped are answered so too), StopRefused when stop
// refuses its by or why; it stays pending while stop does not know the
// window (it may not run here yet) or another owner holds it. Answering
// needs UPDATE of the state, answered_by, answered_at and detail columns
// of the stops table. It returns nil when ctx ends or the Store closes.
func (s *Store) ServeStops(ctx context.Context, owner string, stop func(sessionID string, window int, by, why string) error) error {
	if owner == "" || stop == nil {
		return fmt.Errorf("%w: postgres store: serve stops: empty owner or nil stop", watchdog.ErrInvalidArgument)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	sn := newStopNames(&s.n)
	backoff := s.cfg.backoffMin
	for ctx.Err() == nil {
		conn, err := s.connectStops(ctx, sn)
		if err == nil {
			backoff = s.cfg.backoffMin
			err = s.serveStops(ctx, conn, sn, owner, stop)
			closeConn(conn)
		}
		if ctx.Err() != nil {
			break
		}
		s.cfg.log.Warn("postgres store: serving stop requests failed; retrying",
			zap.String("owner", owner), zap.Duration("retry_in", backoff), zap.Error(err))
		if !sleep(ctx, backoff) {
			break
		}
		backoff = min(2*backoff, s.cfg.backoffMax)
	}
	return nil
}

func (s *Store) connectStops(ctx context.Context, sn stopNames) (*pgx.Conn, error) {
	conn, err := s.connectLease(ctx) // the pool's settings and hooks
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{sn.channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// serveStops reads and answers owner's pending requests, then waits for a
// notification or stopPoll, until ctx ends or conn fails.
func (s *Store) serveStops(ctx context.Context, conn *pgx.Conn, sn stopNames, owner string, stop func(string, int, string, string) error) error {
	pending := `SELECT r.id, r.aggregate_id, r.window_number, r.requested_by, r.why, w.open FROM ` + sn.table + ` r
JOIN ` + s.n.windows + ` w ON w.aggregate_id = r.aggregate_id AND w.window_number = r.window_number
WHERE r.state = 'pending' AND w.owner = $1 ORDER BY r.id`
	answer := `WITH a AS (UPDATE ` + sn.table + ` SET state = $2, answered_by = $3, answered_at = now(), detail = $4
	WHERE id = $1 AND state = 'pending' RETURNING id)
SELECT pg_notify('` + sn.answers + `', id::text) FROM a`
	type req struct {
		id      int64
		agg     string
		window  int32
		by, why string
		open    bool
	}
	for {
		rows, err := conn.Query(ctx, pending, owner)
		if err != nil {
			return err
		}
		reqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (q req, err error) {
			return q, r.Scan(&q.id, &q.agg, &q.window, &q.by, &q.why, &q.open)
		})
		if err != nil {
			return err
		}
		stoppedBy := map[windowKey]req{}
		for _, q := range reqs {
			state, detail := "", ""
			k := windowKey{q.agg, q.window}
			if first, ok := stoppedBy[k]; ok {
				state, detail = StopEnded, fmt.Sprintf("window %d was stopped at request %d, by %s: %s", q.window, first.id, first.by, first.why)
			} else if !q.open {
				state, detail = StopEnded, fmt.Sprintf("window %d had already ended", q.window)
			} else if q.by == "" {
				state, detail = StopRefused, "the request names no requester"
			} else {
				err := stop(q.agg, int(q.window), q.by, q.why)
				switch {
				case err == nil:
					state, detail = StopStopped, fmt.Sprintf("window %d stopped by its owner %s", q.window, owner)
					stoppedBy[k] = q
				case errors.Is(err, watchdog.ErrAlreadyWatched), errors.Is(err, watchdog.ErrUnknownSession):
					continue // not running here (yet): asked again at the next read
				case errors.Is(err, watchdog.ErrAlreadyDecided):
					state, detail = StopEnded, err.Error()
				case errors.Is(err, watchdog.ErrInvalidArgument):
					state, detail = StopRefused, err.Error()
				default:
					s.cfg.log.Warn("postgres store: a stop request failed; asked again at the next read",
						zap.Int64("request", q.id), zap.String("session_id", q.agg), zap.Error(err))
					continue
				}
			}
			// Answered even if ctx ends meanwhile: a Watchdog that
			// closes once its last window ends still says so.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerWithin)
			_, err := conn.Exec(actx, answer, q.id, state, owner, detail)
			cancel()
			if err != nil {
				return err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, stopPoll)
		_, err = conn.WaitForNotification(wctx) // the pgx.Conn's: it holds those that came during a query
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !pgconn.Timeout(err) {
			return err
		}
	}
}
