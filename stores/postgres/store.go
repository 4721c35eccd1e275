// Package postgres is a watchdog.EventStore on PostgreSQL, for a fleet of
// orchestrator processes that share sessions: one process can resume a
// session another started, exactly one terminal event is recorded per
// session window however many processes race to decide it, and a component
// in one process can follow (watchdog.Follow) a session that a Watchdog in
// another process supervises.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	store, err := postgres.New(ctx, pool) // creates the table if missing
//	defer store.Close()
//	w := watchdog.New(watchdog.WithStore(store))
//
// Every event is one row of one table (default "watchdog_events"): the
// event's JSON exactly as Event.MarshalJSON wrote it (a json column, so
// unknown fields round-trip), plus columns for the store's own use. The
// database enforces the contract: a unique constraint on event_id makes
// appends idempotent, a partial unique index on (aggregate_id, window) of
// terminal rows makes the second terminal event fail, whichever process
// sends it, and an identity column assigns seq.
//
// For a fleet, the Store is a watchdog.Arbiter (one opening per window: a
// second Start of an id open elsewhere gets watchdog.ErrAlreadyWatched) and
// a watchdog.Leaser: each Watchdog's lease lives in a leases table, expiry
// is judged on the database's clock, a windows table kept by triggers says
// who owns each open window and fences the writes of any other owner, and
// Adopt hands the windows of expired owners to exactly one member (see
// fleetSchema in fleet.go and the README's "Running a fleet").
//
// Subscriptions use LISTEN/NOTIFY on one dedicated connection per Store: an
// Append notifies "seq:aggregate_id" in its transaction, and each
// subscription reads its aggregate's rows after the last seq it delivered.
// When that connection is lost, the Store reconnects with backoff and every
// subscription catches up from its last seq, so no event is missed.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/slogzap"
)

// DefaultTable is the table a Store uses unless WithTable says otherwise.
const DefaultTable = "watchdog_events"

// Option configures New and Migrate.
type Option func(*config)

type config struct {
	table      string
	log        *zap.Logger
	backoffMin time.Duration
	backoffMax time.Duration
	noMigrate  bool // WithoutMigration
}

// WithTable sets the events table: a name of letters, digits and
// underscores (at most 40 bytes, not starting with a digit), optionally
// qualified by a schema of the same form ("schema.table"), 63 bytes at most
// in all. The same name is the LISTEN/NOTIFY channel. Default DefaultTable. Every process of a fleet
// must use the same table.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithLogger sets the logger for the subscription machinery (a lost listener
// connection and its reconnects, failed catch-up reads). Default: no
// logging (zap.NewNop).
func WithLogger(l *zap.Logger) Option { return func(c *config) { c.log = l } }

// WithSlog is WithLogger for a *slog.Logger: the Store logs the same
// messages through l (zap's levels and fields mapped to slog's). A nil l
// means no logging. The last of WithLogger and WithSlog given wins.
func WithSlog(l *slog.Logger) Option { return func(c *config) { c.log = slogzap.New(l) } }

// WithReconnectBackoff sets how long the listener waits before reconnecting
// after losing its connection, and before a failed catch-up read is retried:
// min at first, doubling up to max. Defaults 100 ms and 5 s.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,39}\.)?[A-Za-z_][A-Za-z0-9_]{0,39}$`)

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, log: zap.NewNop(), backoffMin: 100 * time.Millisecond, backoffMax: 5 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if !tableName.MatchString(c.table) || len(c.table) > 63 {
		return c, fmt.Errorf("%w: postgres store: table name %q: want [schema.]name of letters, digits and underscores, at most 40 bytes each and 63 in all", watchdog.ErrInvalidArgument, c.table)
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if c.backoffMin <= 0 || c.backoffMax < c.backoffMin {
		return c, fmt.Errorf("%w: postgres store: reconnect backoff %v..%v", watchdog.ErrInvalidArgument, c.backoffMin, c.backoffMax)
	}
	return c, nil
}

// names are the SQL identifiers and statements of one table.
type names struct {
	table         string // sanitized, possibly schema-qualified
	channel       string // raw channel name, for pg_notify
	terminalIndex string // raw index name, as PgError.ConstraintName reports it
	openingIndex  string // the same, of the index that keeps one opening per window
	lockSalt      string
	insert        string
	load          string
	loadAfter     string
	maxSeq        string
	winner        string
	opener        string
	lockEach      string
	insertEach    string
	held          string

	windows, leases  string // the fleet's tables, sanitized
	fenceFn, trackFn string // their trigger functions, sanitized
	base, schema     string // raw
}

func newNames(table string) names {
	parts := strings.Split(table, ".")
	base := parts[len(parts)-1]
	t := pgx.Identifier(parts).Sanitize()
	n := names{
		table:         t,
		channel:       table,
		terminalIndex: base + "_one_terminal",
		openingIndex:  base + "_one_opening",
		lockSalt:      table,
	}
	n.insert = `WITH ins AS (
	INSERT INTO ` + t + ` (event_id, aggregate_id, event_kind, window_number, terminal, opens, owner, event)
	VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), $8)
	ON CONFLICT (event_id) DO NOTHING
	RETURNING seq, aggregate_id)
SELECT seq, pg_notify($9, seq::text || ':' || CASE WHEN octet_length(aggregate_id) <= 7000 THEN aggregate_id ELSE '' END) FROM ins`
	n.load = `SELECT seq, event FROM ` + t + ` WHERE aggregate_id = $1 ORDER BY seq`
	n.loadAfter = `SELECT seq, event FROM ` + t + ` WHERE aggregate_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	n.maxSeq = `SELECT coalesce(max(seq), 0) FROM ` + t + ` WHERE aggregate_id = $1`
	n.winner = `SELECT event_id FROM ` + t + ` WHERE aggregate_id = $1 AND window_number = $2 AND terminal`
	n.opener = `SELECT event_id FROM ` + t + ` WHERE aggregate_id = $1 AND window_number = $2 AND opens`
	n.lockEach = `SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS u(k)`
	n.insertEach = `INSERT INTO ` + t + ` (event_id, aggregate_id, event_kind, window_number, terminal, opens, owner, event)
SELECT i, a, k, w, term, o, NULLIF(wd, ''), e::json FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::boolean[], $6::boolean[], $7::text[], $8::text[]) AS u(i, a, k, w, term, o, wd, e)
ON CONFLICT DO NOTHING
RETURNING event_id`
	n.held = `SELECT event_id FROM ` + t + ` WHERE event_id = ANY($1::text[])`
	qualify := func(name string) string {
		if len(parts) == 2 {
			return pgx.Identifier{parts[0], name}.Sanitize()
		}
		return pgx.Identifier{name}.Sanitize()
	}
	n.windows, n.leases = qualify(base+"_windows"), qualify(base+"_leases")
	n.fenceFn, n.trackFn = qualify(base+"_fence"), qualify(base+"_track")
	n.base = base
	return n
}

// Migrate creates the events table and its indexes if they do not exist.
// New calls it; call it yourself to create the schema ahead of time (for
// example from a deployment step) with the same options. It is idempotent
// and safe to run from many processes at once (it serialises on an
// advisory lock). The schema:
//
//	CREATE TABLE watchdog_events (
//		seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//		event_id      text NOT NULL CONSTRAINT watchdog_events_event_id_key UNIQUE,
//		aggregate_id  text NOT NULL,
//		event_kind    text NOT NULL,
//		window_number integer NOT NULL,
//		terminal      boolean NOT NULL,  -- Event.Terminal()
//		opens         boolean NOT NULL DEFAULT false, -- Event.OpensWindow
//		event         json NOT NULL,     -- the event's JSON, seq omitted
//		recorded_at   timestamptz NOT NULL DEFAULT now());
//	CREATE INDEX watchdog_events_aggregate ON watchdog_events (aggregate_id, seq);
//	CREATE UNIQUE INDEX watchdog_events_one_terminal
//		ON watchdog_events (aggregate_id, window_number) WHERE terminal;
//	CREATE UNIQUE INDEX watchdog_events_one_opening
//		ON watchdog_events (aggregate_id, window_number) WHERE opens;
//
// Beside it, the fleet's tables and triggers (see Heartbeat and Adopt): a
// windows table (the owner of each window an event with an owner opened or
// resumed), a leases table (each owner's expiry and last heartbeat on the
// database's clock), a BEFORE INSERT trigger that refuses an event of a
// window another owner holds (SQLSTATE WD001) and an AFTER INSERT trigger
// that keeps the windows table; and the stops table of remote stop requests
// with its trigger (see RequestStop and ServeStops; docs/stopping.md).
//
// On a table an earlier version created, Migrate adds the opens column and
// marks the first event of each window as its opening when it is a start
// or a resume (a window that version let two processes open keeps its first
// opening; the other stays in the log, unmarked), then creates the index,
// in one transaction. In a fleet that mixes versions, the earlier ones keep
// working on the migrated table (they leave opens false), but their starts
// and resumes are not arbitrated: upgrade every process to get exactly one
// opening per window. Their heartbeats also still wait for the window rows
// an append holds, and can deadlock with appends (see Heartbeat); the
// schema is the same. Earlier versions also read the notifications of
// AppendEach (see notifyPayload).
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	if pool == nil {
		return fmt.Errorf("%w: postgres store: nil pool", watchdog.ErrInvalidArgument)
	}
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	return migrate(ctx, pool, c.table)
}

func migrate(ctx context.Context, pool *pgxpool.Pool, table string) error {
	n := newNames(table)
	base := n.terminalIndex[:len(n.terminalIndex)-len("_one_terminal")]
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: migrate %s: %w", table, err)
	}
	defer tx.Rollback(ctx) // a cancelled ctx closes the connection, which rolls back
	stmts := []string{
		`SELECT pg_advisory_xact_lock(` + strconv.FormatInt(lockKey("migrate", table), 10) + `)`,
		`CREATE TABLE IF NOT EXISTS ` + n.table + ` (
	seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id      text NOT NULL,
	aggregate_id  text NOT NULL,
	event_kind    text NOT NULL,
	window_number integer NOT NULL,
	terminal      boolean NOT NULL,
	opens         boolean NOT NULL DEFAULT false,
	event         json NOT NULL,
	recorded_at   timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT ` + pgx.Identifier{base + "_event_id_key"}.Sanitize() + ` UNIQUE (event_id))`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{base + "_aggregate"}.Sanitize() + ` ON ` + n.table + ` (aggregate_id, seq)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS ` + pgx.Identifier{n.terminalIndex}.Sanitize() + ` ON ` + n.table + ` (aggregate_id, window_number) WHERE terminal`,
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres store: migrate %s: %w", table, err)
		}
	}
	// A table written by a version before window openings were arbitrated
	// has no opens column: add it, and mark the first event of each window
	// as its opening when it is a start or a resume. A window such a
	// version opened twice (two starts, two resumes) keeps its first
	// opening; the later one stays in the log, unmarked.
	var hasOpens bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'opens' AND NOT attisdropped)`,
		n.table).Scan(&hasOpens); err != nil {
		return fmt.Errorf("postgres store: migrate %s: %w", table, err)
	}
	if !hasOpens {
		for _, s := range []string{
			`ALTER TABLE ` + n.table + ` ADD COLUMN opens boolean NOT NULL DEFAULT false`,
			`UPDATE ` + n.table + ` SET opens = true WHERE event_kind IN ('` + watchdog.KindStart + `', '` + watchdog.KindResume + `')
	AND seq IN (SELECT min(seq) FROM ` + n.table + ` GROUP BY aggregate_id, window_number)`,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("postgres store: migrate %s: add the opens column: %w", table, err)
			}
		}
	}
	if _, err := tx.Exec(ctx, `CREATE UNIQUE INDEX IF NOT EXISTS `+pgx.Identifier{n.openingIndex}.Sanitize()+` ON `+n.table+` (aggregate_id, window_number) WHERE opens`); err != nil {
		return fmt.Errorf("postgres store: migrate %s: %w", table, err)
	}
	for _, s := range append(fleetSchema(&n), liveSchema(&n)...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres store: migrate %s: fleet schema: %w", table, err)
		}
	}
	for _, s := range stopSchema(&n) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres store: migrate %s: stops schema: %w", table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres store: migrate %s: %w", table, err)
	}
	return nil
}

// lockKey is the advisory lock key of (kind, table, id).
func lockKey(parts ...string) int64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return int64(h.Sum64())
}

// Store is a watchdog.EventStore and watchdog.Subscriber on PostgreSQL. All
// methods are safe for concurrent use, and any number of Stores, in any
// number of processes, may share one table. Create it with New; Close it
// to end its subscriptions. The zero value is not usable.
type Store struct {
	pool *pgxpool.Pool
	cfg  config
	n    names

	appName   string // application_name of the listener connection
	leaseName string // application_name of the lease connection

	// The lease connection: Heartbeat's own, so that a heartbeat never
	// waits for the pool behind appends and loads (see onLeaseConn).
	// leaseSem, of capacity 1, is the right to use leaseConn.
	leaseSem  chan struct{}
	leaseConn *pgx.Conn

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	listening bool          // the listener goroutine runs
	ready     chan struct{} // closed while the listener's LISTEN is active
	subs      map[string]map[*subscription]struct{}

	// The checkpoints a heartbeat did not keep, by owner, because an
	// append or an adoption held their window's row at that instant (or
	// the heartbeat failed): that owner's next heartbeat carries them,
	// under the newer ones it brings (see Heartbeat). Release forgets them.
	deferMu  sync.Mutex
	deferred map[string]map[windowKey]ckptRow // owner -> window -> checkpoint

	// test hooks, set before the first Subscribe
	onListen    func()     // after each successful LISTEN
	onReconnect func(bool) // before each connection attempt; true after a loss
}

// New returns a Store on pool, creating its table if it does not exist (see
// Migrate), unless WithoutMigration says the schema is there already. The pool stays the caller's: Close does not close it. The
// subscription listener uses one extra connection, made with the pool's
// connection settings, only once Subscribe is first called; Heartbeat uses
// another (see Heartbeat), made the same way (and through the pool's
// BeforeConnect and AfterConnect hooks) at the first heartbeat.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: postgres store: nil context", watchdog.ErrInvalidArgument)
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres store: nil pool", watchdog.ErrInvalidArgument)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.noMigrate {
		err = checkSchema(ctx, pool, c.table)
	} else {
		err = migrate(ctx, pool, c.table)
	}
	if err != nil {
		return nil, err
	}
	s := &Store{
		pool:      pool,
		cfg:       c,
		n:         newNames(c.table),
		appName:   truncate("watchdog listen "+c.table, 63),
		leaseName: truncate("watchdog lease "+c.table, 63),
		leaseSem:  make(chan struct{}, 1),
		ready:     make(chan struct{}),
		subs:      make(map[string]map[*subscription]struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background()) //watchdog:unbounded the store's lifetime (Close), not New's
	return s, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Table returns the events table's name, as given to WithTable.
func (s *Store) Table() string { return s.cfg.table }

// validate is Event.Validate (which also refuses what PostgreSQL text
// cannot hold in the id columns: NUL bytes, invalid UTF-8), plus a window
// that fits the integer column. Either is refused for good, with no round
// trip.
func validate(e watchdog.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if e.Window > 1<<31-1 {
		return fmt.Errorf("%w: event %q: window %d does not fit an integer column", watchdog.ErrInvalidEvent, e.ID, e.Window)
	}
	return nil
}

// encode is e's row payload: its JSON, seq omitted, or the error that
// refuses it for good (see validate).
func encode(e watchdog.Event) (string, error) {
	if err := validate(e); err != nil {
		return "", err
	}
	e.Seq = 0
	b, err := e.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("%w: %v", watchdog.ErrInvalidEvent, err)
	}
	return string(b), nil
}

func (s *Store) closedErr() error {
	return fmt.Errorf("%w: postgres store %s", watchdog.ErrClosed, s.cfg.table)
}

// Append implements watchdog.EventStore in one transaction: all events or
// none. It takes a transaction-scoped advisory lock per aggregate, so the
// appends of one session commit in seq order (which is what lets a
// subscription catch up by seq), then inserts each event; an event_id the
// table holds is skipped. A terminal event for a window that has one fails
// on the database's unique index, and Append returns an error wrapping
// watchdog.ErrAlreadyDecided that names the winning event. After Close it
// returns an error wrapping watchdog.ErrClosed.
//
// An event that can never be recorded is refused for good: Append returns
// an error wrapping watchdog.ErrInvalidEvent that names it, without a round
// trip if Event.Validate refuses it, else when the database refuses its
// insert in a way that a retry would repeat (see refusedForGood: a value
// too long for an index, text the database's encoding cannot hold, a check
// or not-null constraint an operator added); the error then wraps the
// *pgconn.PgError too. The whole batch is refused, as atomicity demands,
// and nothing is held against its other events: appended without the
// named one, they are recorded. Any other failure (a lost connection, a
// serialization failure, a deadlock, a server shutting down, a full NOTIFY
// queue at commit) is returned as it is, for the caller to retry.
func (s *Store) Append(ctx context.Context, events ...watchdog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return s.closedErr()
	}
	if len(events) == 0 {
		return nil
	}
	payloads := make([]string, len(events))
	var keys []int64
	for i, e := range events {
		b, err := encode(e)
		if err != nil {
			return err
		}
		payloads[i] = b
		keys = append(keys, lockKey("append", s.cfg.table, e.AggregateID))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: append: begin: %w", err)
	}
	defer tx.Rollback(ctx) // a cancelled ctx closes the connection, which rolls back
	b := &pgx.Batch{}
	for _, k := range keys {
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, k)
	}
	for i, e := range events {
		b.Queue(s.n.insert, e.ID, e.AggregateID, e.Kind, e.Window, e.Terminal(), e.OpensWindow, e.Owner, payloads[i], s.n.channel)
	}
	br := tx.SendBatch(ctx, b)
	var failed *watchdog.Event
	for range keys {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		for i := range events {
			var seq int64
			var ignored any
			err = br.QueryRow().Scan(&seq, &ignored)
			if errors.Is(err, pgx.ErrNoRows) { // a known event_id: skipped
				err = nil
				continue
			}
			if err != nil {
				failed = &events[i]
				break
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err == nil {
		return nil
	}
	switch s.n.classify(err, failed != nil) {
	case decided:
		_ = tx.Rollback(ctx)
		return s.decidedErr(ctx, *failed, err)
	case watched:
		_ = tx.Rollback(ctx)
		return s.watchedErr(ctx, *failed)
	case fence:
		return fencedErr(*failed, err)
	case invalid:
		return fmt.Errorf("%w: postgres store: event %q (session %q window %d) refused for good by the database (nothing of its batch of %d was recorded): %w",
			watchdog.ErrInvalidEvent, failed.ID, failed.AggregateID, failed.Window, len(events), err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = errors.Join(ctxErr, err)
	}
	return fmt.Errorf("postgres store: append: %w", err)
}

// AppendEach implements watchdog.EachAppender: the batch is written in one
// round trip and one transaction (the advisory locks of its sessions, in
// key order, one insert of every event, and one notification), and each
// event gets its own result. An event_id the table holds is skipped; a
// terminal event for a window that has one is not inserted and gets an
// error wrapping watchdog.ErrAlreadyDecided that names the winner, while
// the rest is recorded. An event Event.Validate refuses gets its error
// without a round trip. If the database refuses the insert for good (see
// Append), the batch is written again one event per transaction, so that
// only the event at fault is refused. Any other failure is transient and
// every event of the batch gets it (nothing of the batch is recorded). After
// Close every event gets an error wrapping watchdog.ErrClosed.
func (s *Store) AppendEach(ctx context.Context, events []watchdog.Event) []error {
	errs := make([]error, len(events))
	failAll := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}
	if s.isClosed() {
		return failAll(s.closedErr())
	}
	var (
		at                         []int // index in events of each row
		ids, aggs, kinds, payloads []string
		owners                     []string
		windows                    []int32
		terminal, opens            []bool
		keys                       []int64
	)
	for i, e := range events {
		b, err := encode(e)
		if err != nil {
			errs[i] = err
			continue
		}
		at = append(at, i)
		ids, aggs, kinds = append(ids, e.ID), append(aggs, e.AggregateID), append(kinds, e.Kind)
		windows, terminal, opens = append(windows, int32(e.Window)), append(terminal, e.Terminal()), append(opens, e.OpensWindow)
		payloads = append(payloads, b)
		owners = append(owners, e.Owner)
		keys = append(keys, lockKey("append", s.cfg.table, e.AggregateID))
	}
	if len(at) == 0 {
		return errs
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)

	b := &pgx.Batch{} // one implicit transaction
	b.Queue(s.n.lockEach, keys)
	b.Queue(s.n.insertEach, ids, aggs, kinds, windows, terminal, opens, owners, payloads)
	b.Queue(`SELECT pg_notify($1, $2)`, s.n.channel, notifyPayload(aggs))
	br := s.pool.SendBatch(ctx, b)
	inserted := make(map[string]bool, len(ids))
	_, err := br.Exec()
	insertErr := false
	if err == nil {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			var id string
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error { inserted[id] = true; return nil })
		}
		insertErr = err != nil
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if insertErr && errors.As(err, &pgErr) && (refusedForGood(pgErr.Code) || fenced(pgErr.Code)) {
			return s.appendEachAlone(ctx, events, errs, at)
		}
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = errors.Join(ctxErr, err)
		}
		return failAll(fmt.Errorf("postgres store: append: %w", err))
	}
	if len(inserted) < len(ids) {
		s.explainSkipped(ctx, events, errs, at, inserted)
	}
	for _, e := range errs {
		if e != nil {
			return errs
		}
	}
	return nil
}

// explainSkipped sets the result of each event the insert skipped: none
// for an event_id the table held (a retry), ErrAlreadyDecided for a
// terminal event whose window has another one.
func (s *Store) explainSkipped(ctx context.Context, events []watchdog.Event, errs []error, at []int, inserted map[string]bool) {
	var skipped []string
	for _, i := range at {
		if !inserted[events[i].ID] {
			skipped = append(skipped, events[i].ID)
		}
	}
	rows, err := s.pool.Query(ctx, s.n.held, skipped)
	held := make(map[string]bool, len(skipped))
	if err == nil {
		var id string
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { held[id] = true; return nil })
	}
	for _, i := range at {
		e := events[i]
		switch {
		case inserted[e.ID]: // also a second event with the same id
		case err != nil:
			errs[i] = fmt.Errorf("postgres store: append: reading back a skipped insert: %w", err)
		case held[e.ID]:
		case e.OpensWindow:
			errs[i] = s.watchedErr(ctx, e)
		case e.Terminal():
			errs[i] = s.decidedErr(ctx, e, errors.New("another terminal event holds the window"))
		default:
			errs[i] = fmt.Errorf("postgres store: append: event %q was not inserted, for no reason the store knows", e.ID)
		}
	}
}

// appendEachAlone appends the events at the given indexes one per
// transaction, in order, after the database refused their batch for good:
// only the event at fault is refused. After a transient failure, or a
// fence (another owner holds the window), the later events of the same
// session get that error without being tried: a fire's cancel is never
// recorded without its decision, should the window change hands between
// the two.
func (s *Store) appendEachAlone(ctx context.Context, events []watchdog.Event, errs []error, at []int) []error {
	var retry map[string]error
	for _, i := range at {
		e := events[i]
		if err := retry[e.AggregateID]; err != nil {
			errs[i] = err
			continue
		}
		err := s.Append(ctx, e)
		if err != nil && !errors.Is(err, watchdog.ErrInvalidEvent) && !errors.Is(err, watchdog.ErrAlreadyDecided) {
			if retry == nil {
				retry = make(map[string]error)
			}
			retry[e.AggregateID] = err
		}
		errs[i] = err
	}
	return errs
}

// notifyPayload is the one notification of a batch: a JSON array of its
// sessions' ids, with every ':' escaped (\u003a), or "" when that does not
// fit a payload (every subscription then looks). Earlier versions read a
// payload without ':' the same way, so they keep working beside this one.
func notifyPayload(aggs []string) string {
	uniq := slices.Clone(aggs)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	b, _ := json.Marshal(uniq)
	p := strings.ReplaceAll(string(b), ":", `\u003a`)
	if len(p) > 7000 {
		return ""
	}
	return p
}

// refusal is what a database error of Append means for its caller.
type refusal int

const (
	transient refusal = iota // may pass on a retry: returned as it is
	decided                  // the event lost its window's terminal race
	watched                  // the event lost its window's opening race
	fence                    // another owner holds the event's window
	invalid                  // the event can never be recorded
)

// classify sorts err, a failure of Append's transaction. atEvent says that
// the insert of one event failed (as opposed to the locks or the commit);
// only such a failure can be the event's own doing.
func (n *names) classify(err error, atEvent bool) refusal {
	var pgErr *pgconn.PgError
	if !atEvent || !errors.As(err, &pgErr) {
		return transient
	}
	switch {
	case pgErr.Code == "23505" && pgErr.ConstraintName == n.terminalIndex:
		return decided
	case pgErr.Code == "23505" && pgErr.ConstraintName == n.openingIndex:
		return watched
	case fenced(pgErr.Code):
		return fence
	case refusedForGood(pgErr.Code):
		return invalid
	}
	return transient
}

// refusedForGood reports whether SQLSTATE code, raised by the insert of an
// event, refuses that event for good: the same insert fails the same way on
// every retry. These are class 22, data exception (22021 invalid byte
// sequence, 22P05 untranslatable character, 22001 a value too long for a
// column an operator narrowed, ...); class 54, program limit exceeded
// (54000: index row size exceeds the btree maximum); 23502 not-null
// violation and 23514 check violation (from a column or constraint an
// operator added). Everything else may pass on a retry and is not refused:
// class 08 connection exceptions, 40001 serialization failure, 40P01
// deadlock, class 53 insufficient resources, 57P01 admin shutdown and the
// rest of class 57, 23505 unique violation other than the terminal index.
// (A full NOTIFY queue is 54000 too, but it is raised at commit, which
// classify never takes for an event's doing.)
func refusedForGood(code string) bool {
	switch {
	case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "54"):
		return len(code) == 5
	case code == "23502", code == "23514":
		return true
	}
	return false
}

// decidedErr names the event that already ended e's window.
func (s *Store) decidedErr(ctx context.Context, e watchdog.Event, cause error) error {
	var winner string
	err := s.pool.QueryRow(ctx, s.n.winner, e.AggregateID, e.Window).Scan(&winner)
	if err != nil {
		return fmt.Errorf("%w: session %q window %d: terminal event %s refused by the database (%v)",
			watchdog.ErrAlreadyDecided, e.AggregateID, e.Window, e.ID, cause)
	}
	return fmt.Errorf("%w: session %q window %d already ended by event %s", watchdog.ErrAlreadyDecided, e.AggregateID, e.Window, winner)
}

// watchedErr names the event that already opened e's window.
func (s *Store) watchedErr(ctx context.Context, e watchdog.Event) error {
	var opener string
	if err := s.pool.QueryRow(ctx, s.n.opener, e.AggregateID, e.Window).Scan(&opener); err != nil {
		return fmt.Errorf("%w: session %q window %d: opening event %s refused by the database (another opened the window)",
			watchdog.ErrAlreadyWatched, e.AggregateID, e.Window, e.ID)
	}
	return fmt.Errorf("%w: session %q window %d already opened by event %s", watchdog.ErrAlreadyWatched, e.AggregateID, e.Window, opener)
}

// Arbitrates implements watchdog.Arbiter: the table keeps one opening event
// per session window (a partial unique index), so Start and Resume wait
// for the database's answer, and of several processes that open one window
// exactly one watches it.
func (s *Store) Arbitrates() bool { return true }

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Load implements watchdog.EventStore: the aggregate's events in seq order,
// each with its Seq. After Close it returns an error wrapping
// watchdog.ErrClosed.
func (s *Store) Load(ctx context.Context, aggregateID string) ([]watchdog.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, s.closedErr()
	}
	rows, err := s.pool.Query(ctx, s.n.load, aggregateID)
	if err != nil {
		return nil, fmt.Errorf("postgres store: load %q: %w", aggregateID, err)
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres store: load %q: %w", aggregateID, err)
	}
	return evs, nil
}

func scanEvents(rows pgx.Rows) ([]watchdog.Event, error) {
	defer rows.Close()
	evs := []watchdog.Event{}
	for rows.Next() {
		var seq int64
		var raw []byte
		if err := rows.Scan(&seq, &raw); err != nil {
			return nil, err
		}
		var e watchdog.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("row seq %d: %w", seq, err)
		}
		e.Seq = uint64(seq)
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

// subscription is one Subscribe call: its goroutine reads the aggregate's
// rows after last whenever signal fires, and sends them on out.
type subscription struct {
	aggregate string
	last      int64
	signal    chan struct{}
	out       chan watchdog.Event
}

func (sub *subscription) poke() {
	select {
	case sub.signal <- struct{}{}:
	default:
	}
}

// Subscribe implements watchdog.Subscriber across processes: the channel
// delivers, in seq order, every event of aggregateID appended after
// Subscribe returns, by any process on the same table, until ctx ends or
// the Store is closed; then it is closed. Subscribe returns once the
// Store's listener is listening (the first call connects it), or ctx's
// error if that does not happen before ctx ends. A slow reader never blocks
// Append: undelivered events wait in the table, not in memory. After a lost
// listener connection the subscription catches up from the last event it
// delivered. After Close it returns an error wrapping watchdog.ErrClosed.
func (s *Store) Subscribe(ctx context.Context, aggregateID string) (<-chan watchdog.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.closedErr()
	}
	if !s.listening {
		s.listening = true
		s.wg.Add(1)
		go s.listen()
	}
	ready := s.ready
	s.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, s.closedErr()
	}

	sub := &subscription{aggregate: aggregateID, signal: make(chan struct{}, 1), out: make(chan watchdog.Event)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.closedErr()
	}
	if s.subs[aggregateID] == nil {
		s.subs[aggregateID] = make(map[*subscription]struct{})
	}
	s.subs[aggregateID][sub] = struct{}{}
	s.wg.Add(1) // under mu, with closed false: Close waits for it
	s.mu.Unlock()
	// Registered first, then the starting point: an event committed after
	// this read has a greater seq and is either notified or caught up
	// after a reconnect.
	if err := s.pool.QueryRow(ctx, s.n.maxSeq, aggregateID).Scan(&sub.last); err != nil {
		s.unregister(sub)
		s.wg.Done()
		return nil, fmt.Errorf("postgres store: subscribe %q: %w", aggregateID, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	go func() {
		defer s.wg.Done()
		defer close(sub.out)
		defer s.unregister(sub)
		defer stop()
		defer cancel()
		s.follow(sctx, sub)
	}()
	return sub.out, nil
}

func (s *Store) unregister(sub *subscription) {
	s.mu.Lock()
	delete(s.subs[sub.aggregate], sub)
	if len(s.subs[sub.aggregate]) == 0 {
		delete(s.subs, sub.aggregate)
	}
	s.mu.Unlock()
}

const catchUpBatch = 500

// follow is a subscription's goroutine.
func (s *Store) follow(ctx context.Context, sub *subscription) {
	backoff := s.cfg.backoffMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.signal:
		}
		for {
			rows, err := s.pool.Query(ctx, s.n.loadAfter, sub.aggregate, sub.last, catchUpBatch)
			var evs []watchdog.Event
			if err == nil {
				evs, err = scanEvents(rows)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.cfg.log.Warn("postgres store: subscription catch-up failed; retrying",
					zap.String("aggregate_id", sub.aggregate), zap.Int64("after_seq", sub.last),
					zap.Duration("retry_in", backoff), zap.Error(err))
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, s.cfg.backoffMax)
				continue
			}
			backoff = s.cfg.backoffMin
			for _, e := range evs {
				select {
				case sub.out <- e:
					sub.last = int64(e.Seq)
				case <-ctx.Done():
					return
				}
			}
			if len(evs) < catchUpBatch {
				break
			}
		}
	}
}

// sleep waits for d or ctx; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// listen is the listener goroutine: it holds one connection that LISTENs on
// the table's channel, pokes the subscriptions of each notified aggregate,
// and reconnects when the connection is lost, poking every subscription so
// that it catches up.
func (s *Store) listen() {
	defer s.wg.Done()
	backoff := s.cfg.backoffMin
	lost := false
	for {
		if hook := s.onReconnect; hook != nil {
			hook(lost)
		}
		conn, err := s.connectListener()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.cfg.log.Warn("postgres store: listener cannot connect; retrying",
				zap.String("table", s.cfg.table), zap.Duration("retry_in", backoff), zap.Error(err))
			if !sleep(s.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, s.cfg.backoffMax)
			continue
		}
		backoff = s.cfg.backoffMin
		s.mu.Lock()
		close(s.ready)
		for _, subs := range s.subs {
			for sub := range subs {
				sub.poke() // catch up whatever a lost connection missed
			}
		}
		s.mu.Unlock()
		if hook := s.onListen; hook != nil {
			hook()
		}
		err = s.dispatch(conn)
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		s.mu.Lock()
		s.ready = make(chan struct{})
		s.mu.Unlock()
		if s.ctx.Err() != nil {
			return
		}
		lost = true
		s.cfg.log.Warn("postgres store: listener connection lost; reconnecting",
			zap.String("table", s.cfg.table), zap.Error(err))
	}
}

func (s *Store) connectListener() (*pgx.Conn, error) {
	cc := s.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = s.appName
	conn, err := pgx.ConnectConfig(s.ctx, cc)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(s.ctx, "LISTEN "+pgx.Identifier{s.n.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// onLeaseConn runs f on the lease connection, connecting it first if
// needed, bounded by ctx and by the Store's lifetime (f gets a context
// that ends with either). The connection is the pool's kind (its
// settings, its BeforeConnect and AfterConnect hooks) but not the pool's:
// a pool busy with appends and loads never makes a heartbeat wait for a
// connection. f runs on one connection at a time (a Store's owners take
// turns). When f fails because the connection broke (the server ended it
// while idle, a network failure), f runs once more on a new connection if
// it failed on one that had served before: f must be idempotent.
func (s *Store) onLeaseConn(ctx context.Context, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // Close ends it
	defer stop()
	select {
	case s.leaseSem <- struct{}{}:
	case <-ctx.Done():
		if s.isClosed() {
			return s.closedErr()
		}
		return ctx.Err()
	}
	defer func() { <-s.leaseSem }()
	if s.isClosed() {
		return s.closedErr()
	}
	for fresh := false; ; {
		if s.leaseConn == nil {
			conn, err := s.connectLease(ctx)
			if err != nil {
				return err
			}
			s.leaseConn, fresh = conn, true
		}
		err := f(ctx, s.leaseConn)
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if !s.leaseConn.IsClosed() && errors.As(err, &pgErr) {
			return err // the server refused the statements; the connection serves on
		}
		closeConn(s.leaseConn)
		s.leaseConn = nil
		if fresh || ctx.Err() != nil {
			return err
		}
	}
}

// connectLease connects the lease connection as the pool connects its own.
func (s *Store) connectLease(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config()
	cc := cfg.ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = s.leaseName
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, fmt.Errorf("connect the lease connection: BeforeConnect: %w", err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect the lease connection: %w", err)
	}
	if cfg.AfterConnect != nil {
		if err := cfg.AfterConnect(ctx, conn); err != nil {
			closeConn(conn)
			return nil, fmt.Errorf("connect the lease connection: AfterConnect: %w", err)
		}
	}
	return conn, nil
}

// closeConn closes conn, waiting at most a second for the server.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// dispatch pokes subscriptions for each notification until the connection
// fails or the Store is closed.
func (s *Store) dispatch(conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			return err
		}
		aggs := notified(n.Payload)
		s.mu.Lock()
		if aggs == nil { // an id too long for a payload: everyone looks
			for _, subs := range s.subs {
				for sub := range subs {
					sub.poke()
				}
			}
		}
		for _, agg := range aggs {
			for sub := range s.subs[agg] {
				sub.poke()
			}
		}
		s.mu.Unlock()
	}
}

// notified returns the sessions a notification names, or nil when every
// subscription must look: "seq:aggregate_id" from Append, a JSON array from
// AppendEach (see notifyPayload), "" or anything else.
func notified(payload string) []string {
	if strings.HasPrefix(payload, "[") {
		var aggs []string
		if json.Unmarshal([]byte(payload), &aggs) == nil && len(aggs) > 0 {
			return aggs
		}
		return nil
	}
	if _, agg, ok := strings.Cut(payload, ":"); ok && agg != "" {
		return []string{agg}
	}
	return nil
}

// Close ends every subscription (closing its channel), closes the listener
// and lease connections and waits for the Store's goroutines. It does not
// close the pool. Later calls do nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.leaseSem <- struct{}{} // a heartbeat under way ends with s.ctx
	if s.leaseConn != nil {
		closeConn(s.leaseConn)
		s.leaseConn = nil
	}
	<-s.leaseSem
	return nil
}

var _ interface {
	watchdog.EventStore
	watchdog.EachAppender
	watchdog.Arbiter
	watchdog.Leaser
	watchdog.Subscriber
	watchdog.StopSource
} = (*Store)(nil)
