package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// The loser of an opening race learns which event opened the window, also
// with the longest table name (its index names must not be truncated).
func TestAlreadyWatchedNamesTheOpener(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	table := uniqueTable(t) + strings.Repeat("x", 24)
	s1, s2 := newStore(t, pool, WithTable(table)), newStore(t, testPool(t), WithTable(table))
	first := ev("first", "a", watchdog.KindStart, 1)
	first.OpensWindow = true
	require.NoError(t, s1.Append(ctx, first))
	second := ev("second", "a", watchdog.KindStart, 1)
	second.OpensWindow = true
	err := s2.Append(ctx, second)
	require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
	assert.Contains(t, err.Error(), "already opened by event first")
	errs := s2.AppendEach(ctx, []watchdog.Event{second})
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], watchdog.ErrAlreadyWatched)
	assert.Contains(t, errs[0].Error(), "already opened by event first")
}

// A table written by the version before openings were arbitrated, holding
// what that version let happen (two starts of one window, two resumes that
// both opened window 2), migrates: each window keeps its first opening,
// nothing is lost, and from then on a window is opened once.
func TestMigrateArbitratesOpeningsOnATableWithDuplicates(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	table := uniqueTable(t)
	id := pgx.Identifier{table}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+id+` (
	seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id      text NOT NULL,
	aggregate_id  text NOT NULL,
	event_kind    text NOT NULL,
	window_number integer NOT NULL,
	terminal      boolean NOT NULL,
	event         json NOT NULL,
	recorded_at   timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT `+pgx.Identifier{table + "_event_id_key"}.Sanitize()+` UNIQUE (event_id));
CREATE INDEX `+pgx.Identifier{table + "_aggregate"}.Sanitize()+` ON `+id+` (aggregate_id, seq);
CREATE UNIQUE INDEX `+pgx.Identifier{table + "_one_terminal"}.Sanitize()+` ON `+id+` (aggregate_id, window_number) WHERE terminal`)
	require.NoError(t, err)
	old := []watchdog.Event{
		ev("start-1", "a", watchdog.KindStart, 1),
		ev("start-2", "a", watchdog.KindStart, 1), // a second process's start
		ev("stop", "a", watchdog.KindStop, 1),
		ev("resume-1", "a", watchdog.KindResume, 2),
		ev("resume-2", "a", watchdog.KindResume, 2), // both opened window 2
		ev("verdict", "b", watchdog.KindVerdict, 1), // a window whose first event is no opening
	}
	for _, e := range old {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO `+id+` (event_id, aggregate_id, event_kind, window_number, terminal, event) VALUES ($1, $2, $3, $4, $5, $6)`,
			e.ID, e.AggregateID, e.Kind, e.Window, e.Terminal(), string(b))
		require.NoError(t, err)
	}

	s := newStore(t, pool, WithTable(table)) // migrates
	rows, err := pool.Query(ctx, `SELECT event_id FROM `+id+` WHERE opens ORDER BY seq`)
	require.NoError(t, err)
	marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"start-1", "resume-1"}, marked, "each window's first opening")
	evs, err := s.Load(ctx, "a")
	require.NoError(t, err)
	assert.Len(t, evs, 5, "nothing lost")

	again := ev("start-3", "a", watchdog.KindStart, 1)
	again.OpensWindow = true
	require.ErrorIs(t, s.Append(ctx, again), watchdog.ErrAlreadyWatched)
	next := ev("resume-3", "a", watchdog.KindResume, 3)
	next.OpensWindow = true
	require.NoError(t, s.Append(ctx, ev("stop-2", "a", watchdog.KindStop, 2), next))
	_, err = New(ctx, pool, WithTable(table))
	require.NoError(t, err, "Migrate again is a no-op")
}

// Two Watchdogs (two processes) on one table start the same id: the second
// is told the window is open elsewhere, and the table holds one start.
func TestTwoWatchdogsStartingOneIDOpenItOnce(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	table := uniqueTable(t)
	s1, s2 := newStore(t, pool, WithTable(table)), newStore(t, testPool(t), WithTable(table))
	w1, w2 := watchdog.New(watchdog.WithStore(s1)), watchdog.New(watchdog.WithStore(s2))
	defer w1.Close(ctx)
	defer w2.Close(ctx)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := w1.Start(sctx, "x", time.Now(), watchdog.Policy{})
	require.NoError(t, err)
	_, err = w2.Start(sctx, "x", time.Now(), watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
	require.NoError(t, s.Stop())
	require.NoError(t, w1.Check(sctx)) // the stop is recorded
	_, err = w2.Resume(sctx, "x", watchdog.Policy{})
	require.NoError(t, err, "once ended, another process resumes it")
	evs, err := s1.Load(ctx, "x")
	require.NoError(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindStop, watchdog.KindResume}, kinds)
}
