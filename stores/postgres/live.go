package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/live"
)

// liveSchema is what the live list (ReadLive) needs beside the fleet's
// schema: on each window's row, the instant of its owner's last checkpoint
// on the database's clock, and what that checkpoint said besides the
// evidence (the window's start and deadline, the freshest channel, calls
// in flight, the earliest stop); and an index of the verdicts. Separate
// statements, run after fleetSchema's.
func liveSchema(n *names) []string {
	return []string{
		`ALTER TABLE ` + n.windows + ` ADD COLUMN IF NOT EXISTS checkpoint_at timestamptz`,
		`ALTER TABLE ` + n.windows + ` ADD COLUMN IF NOT EXISTS live json`,
		// Each open window's latest verdict, in one probe however many
		// events the window has; kept on verdicts and decisions only.
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{n.base + "_verdicts"}.Sanitize() + ` ON ` + n.table +
			` (aggregate_id, window_number, seq) WHERE event_kind IN ('` + watchdog.KindVerdict + `', '` + watchdog.KindDecision + `')`,
	}
}

// liveJSON is the live column: a checkpoint's facts besides its evidence.
type liveJSON struct {
	WindowStartedAt time.Time `json:"window_started_at,omitzero"`
	Deadline        time.Time `json:"deadline,omitzero"`
	Freshest        string    `json:"freshest,omitempty"`
	FreshestAt      time.Time `json:"freshest_at,omitzero"`
	CallsInFlight   int       `json:"calls_in_flight,omitempty"`
	OldestCall      string    `json:"oldest_call,omitempty"`
	StopAt          time.Time `json:"stop_at,omitzero"`
	StopRule        string    `json:"stop_rule,omitempty"`
}

// LiveChannel returns the LISTEN/NOTIFY channel on which a Store's
// heartbeat notifies, in its transaction, each time it keeps checkpoints
// (the payload is the owner's id): an admin page that LISTENs on it can
// refresh its ReadLive list when some owner's facts changed, instead of
// polling. It is the events table's name (as given to WithTable) followed
// by ":live", or the table's unqualified name followed by ":live" when
// that would be longer than 63 bytes.
func LiveChannel(table string) string {
	if len(table)+len(":live") <= 63 {
		return table + ":live"
	}
	n := newNames(table)
	return n.base + ":live"
}

// Querier is what ReadLive reads through: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx (a read-only transaction will do).
type Querier interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ReadLive returns the session windows open now in the fleet that records
// to table (the events table, as given to WithTable; "" means
// DefaultTable), judged on the database's clock, that pass f, sorted by
// their earliest stop (see live.Sort). It reads, in one statement, the
// open rows of the windows table with their owner's lease and last
// checkpoint, and, through the events table's index, each window's latest
// start or resume event (its policy and start) and its latest verdict or
// decision: its cost grows with the open windows, not with the events
// recorded. It only reads (a read-only transaction or read-only
// credentials will do), and never creates the schema: a table that does
// not exist is an error that says so.
//
// A row's facts are as fresh as its owner's last heartbeat that carried a
// checkpoint of the window (Row.FactsAt): an owner sends one for each
// window whose evidence, calls in flight or earliest stop changed, every
// third of its lease (2 s by default). Safe for concurrent use.
func ReadLive(ctx context.Context, q Querier, table string, f live.Filter) (live.List, error) {
	if table == "" {
		table = DefaultTable
	}
	if !tableName.MatchString(table) || len(table) > 63 {
		return live.List{}, fmt.Errorf("%w: postgres live list: table name %q: want [schema.]name of letters, digits and underscores, at most 40 bytes each and 63 in all", watchdog.ErrInvalidArgument, table)
	}
	if ctx == nil || q == nil {
		return live.List{}, fmt.Errorf("%w: postgres live list: nil context or querier", watchdog.ErrInvalidArgument)
	}
	n := newNames(table)
	var owner *string
	if f.Owner != "" {
		owner = &f.Owner
	}
	var sessions []string
	if len(f.Sessions) > 0 {
		sessions = f.Sessions
	}
	// In a transaction (a savepoint in q's) of its own, with JIT off: the
	// statement's cost, a loop over the open windows, passes the planner's
	// threshold, and compiling it took longer than running it (840 ms on
	// 10,000 windows).
	tx, err := q.Begin(ctx)
	if err != nil {
		return live.List{}, fmt.Errorf("postgres live list of %s: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it only read
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return live.List{}, fmt.Errorf("postgres live list of %s: %w", table, err)
	}
	rows, err := tx.Query(ctx, liveQuery(&n), owner, sessions)
	if err != nil {
		return live.List{}, fmt.Errorf("postgres live list of %s: %w", table, err)
	}
	defer rows.Close()
	var (
		at     time.Time
		events []watchdog.Event
		leases = map[string]live.Lease{}
		facts  = map[windowKey]liveFacts{}
	)
	for rows.Next() {
		var (
			agg, wOwner          string
			win                  int32
			ev, lv, opening, vrd []byte
			ckAt, exp, seen      *time.Time
		)
		if err := rows.Scan(&at, &agg, &win, &wOwner, &ev, &lv, &ckAt, &exp, &seen, &opening, &vrd); err != nil {
			return live.List{}, fmt.Errorf("postgres live list of %s: %w", table, err)
		}
		if exp != nil && seen != nil {
			leases[wOwner] = live.Lease{ExpiresAt: *exp, LastSeen: *seen}
		}
		k := windowKey{agg, win}
		lf := liveFacts{owner: wOwner}
		if ckAt != nil {
			lf.at = *ckAt
		}
		_ = json.Unmarshal(lv, &lf.live) // an unreadable one says nothing
		if len(ev) > 0 {
			_ = json.Unmarshal(ev, &lf.evidence)
		}
		facts[k] = lf
		// The window's opening (or, when its checkpoint says the window's
		// start and deadline, that checkpoint's window), then its verdict.
		var open watchdog.Event
		if len(opening) == 0 || json.Unmarshal(opening, &open) != nil {
			open = watchdog.Event{AggregateID: agg, Window: int(win), Kind: watchdog.KindResume, Owner: wOwner,
				WindowStartedAt: lf.live.WindowStartedAt, OccurredAt: lf.live.WindowStartedAt}
			if d := lf.live.Deadline.Sub(lf.live.WindowStartedAt); d > 0 && !lf.live.WindowStartedAt.IsZero() {
				open.ConfiguredBudgetSeconds = d.Seconds()
			}
		}
		events = append(events, open)
		var v watchdog.Event
		if len(vrd) > 0 && json.Unmarshal(vrd, &v) == nil {
			events = append(events, v)
		}
	}
	if err := rows.Err(); err != nil {
		return live.List{}, fmt.Errorf("postgres live list of %s: %w", table, err)
	}
	// The start or resume event precedes the verdict in each window's pair:
	// FromEvents folds them into rows.
	l := live.FromEvents(events, at, leases, live.Filter{})
	for i := range l.Rows {
		r := &l.Rows[i]
		lf, ok := facts[windowKey{r.Session, int32(r.Window)}]
		if !ok {
			continue
		}
		r.Owner = lf.owner // the windows table's: an adopter's, before it recorded anything
		r.Lease = nil
		if ls, ok := leases[r.Owner]; ok {
			ls.Expired = !at.Before(ls.ExpiresAt)
			r.Lease = &ls
		}
		switch {
		case !lf.at.IsZero() && !lf.at.Before(r.FactsAt): // a checkpoint since the latest verdict
			r.FactsAt = lf.at
			if len(lf.evidence) > 0 { // a checkpoint of an earlier version
				r.Freshest, r.FreshestAt = live.Freshest(lf.evidence)
			} else {
				r.Freshest, r.FreshestAt = lf.live.Freshest, lf.live.FreshestAt
			}
			r.CallsInFlight, r.OldestCall = lf.live.CallsInFlight, lf.live.OldestCall
			if !lf.live.StopAt.IsZero() {
				r.StopAt, r.StopRule = lf.live.StopAt, lf.live.StopRule
			}
		case r.StopAt.IsZero():
			r.StopAt, r.StopRule = lf.live.StopAt, lf.live.StopRule
		}
		// A live owner's heartbeat carries every window whose facts changed:
		// its last one confirms them.
		if r.Lease != nil && !r.Lease.Expired && r.Lease.LastSeen.After(r.FactsAt) {
			r.FactsAt = r.Lease.LastSeen
		}
	}
	live.Sort(l.Rows)
	return l, nil
}

// liveFacts is a window's row in the windows table.
type liveFacts struct {
	owner    string
	at       time.Time
	evidence []watchdog.EvidenceEntry
	live     liveJSON
}

// liveQuery is ReadLive's statement: $1 an owner or NULL, $2 sessions or
// NULL.
func liveQuery(n *names) string {
	return `SELECT now(), w.aggregate_id, w.window_number, w.owner, CASE WHEN w.live IS NULL THEN w.evidence END, w.live, w.checkpoint_at,
	l.expires_at, l.last_seen, o.event, v.event
FROM ` + n.windows + ` w
LEFT JOIN ` + n.leases + ` l ON l.owner = w.owner
LEFT JOIN LATERAL (SELECT e.event FROM ` + n.table + ` e
	WHERE (w.live IS NULL OR w.live->>'deadline' IS NULL) -- the checkpoint says the window's start and deadline
		AND e.aggregate_id = w.aggregate_id AND e.window_number = w.window_number
		AND e.event_kind IN ('` + watchdog.KindStart + `', '` + watchdog.KindResume + `')
	ORDER BY e.seq DESC LIMIT 1) o ON true
LEFT JOIN LATERAL (SELECT e.event FROM ` + n.table + ` e
	WHERE e.aggregate_id = w.aggregate_id AND e.window_number = w.window_number
		AND e.event_kind IN ('` + watchdog.KindVerdict + `', '` + watchdog.KindDecision + `')
	ORDER BY e.seq DESC LIMIT 1) v ON true
WHERE w.open AND ($1::text IS NULL OR w.owner = $1) AND ($2::text[] IS NULL OR w.aggregate_id = ANY($2))`
}
