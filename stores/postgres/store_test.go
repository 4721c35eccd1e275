package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/storetest"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

var t0 = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

func TestConformance(t *testing.T) {
	pool := testPool(t)
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		return newStore(t, pool, WithTable(uniqueTable(t)))
	})
}

// Every subtest gets a new Store on one shared table and a pool of its own,
// as processes of a fleet do.
func TestConformanceSharedTable(t *testing.T) {
	table := uniqueTable(t)
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		return newStore(t, testPool(t), WithTable(table))
	})
}

func TestConformanceSchemaQualifiedTable(t *testing.T) {
	pool := testPool(t)
	schema := uniqueTable(t)
	_, err := pool.Exec(context.Background(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		return newStore(t, pool, WithTable(schema+".events"))
	})
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	_, err := New(ctx, nil)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	require.ErrorIs(t, Migrate(ctx, nil), watchdog.ErrInvalidArgument)
	pool := testPool(t)
	for _, name := range []string{"", "1abc", "a-b", `x"; DROP TABLE y; --`, "a.b.c", strings.Repeat("x", 41), strings.Repeat("x", 40) + "." + strings.Repeat("y", 40)} {
		_, err := New(ctx, pool, WithTable(name))
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument, "table %q", name)
	}
	_, err = New(ctx, pool, WithReconnectBackoff(time.Second, time.Millisecond))
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	pool := testPool(t)
	table := uniqueTable(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- Migrate(context.Background(), pool, WithTable(table)) }()
	}
	testwait.Group(t, &wg, "the concurrent migrations")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s := newStore(t, pool, WithTable(table))
	assert.Equal(t, table, s.Table())
}

func TestAfterClose(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, testPool(t), WithTable(uniqueTable(t)))
	require.NoError(t, err)
	sub, err := s.Subscribe(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, open := testwait.Recv(t, sub, "Close to close the subscription")
	assert.False(t, open, "Close closes every subscription")
	require.ErrorIs(t, s.Append(ctx, ev("e1", "a", watchdog.KindStart, 1)), watchdog.ErrClosed)
	_, err = s.Load(ctx, "a")
	require.ErrorIs(t, err, watchdog.ErrClosed)
	_, err = s.Subscribe(ctx, "a")
	require.ErrorIs(t, err, watchdog.ErrClosed)
}

func ev(id, agg, kind string, window int) watchdog.Event {
	return watchdog.Event{
		ID: id, AggregateID: agg, Kind: kind, Window: window,
		SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0,
	}
}

// The loser of a terminal race learns which event won, also with the
// longest table name (its index names must not be truncated).
func TestAlreadyDecidedNamesTheWinner(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	table := uniqueTable(t) + strings.Repeat("x", 24)
	require.Len(t, table, 40)
	s1, s2 := newStore(t, pool, WithTable(table)), newStore(t, testPool(t), WithTable(table))
	require.NoError(t, s1.Append(ctx, ev("win", "a", watchdog.KindCancel, 1)))
	err := s2.Append(ctx, ev("lose", "a", watchdog.KindCancel, 1))
	require.ErrorIs(t, err, watchdog.ErrAlreadyDecided)
	assert.Contains(t, err.Error(), "already ended by event win")
}

// A subscription survives the loss of the listener's connection: events
// appended while it is down are delivered after the reconnect, in order.
func TestSubscriptionCatchesUpAfterListenerConnectionIsKilled(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	s, err := New(ctx, pool, WithTable(uniqueTable(t)), WithReconnectBackoff(10*time.Millisecond, 50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	listening := make(chan struct{}, 4)
	lost := make(chan struct{}, 4)
	gate := make(chan struct{})
	s.onListen = func() { listening <- struct{}{} }
	s.onReconnect = func(afterLoss bool) {
		if afterLoss {
			lost <- struct{}{}
			<-gate // the test appends while the listener is down
		}
	}

	sub, err := s.Subscribe(ctx, "a")
	require.NoError(t, err)
	testwait.For(t, listening, "the listener to listen")
	require.NoError(t, s.Append(ctx, ev("e1", "a", watchdog.KindStart, 1)))
	require.Equal(t, "e1", testwait.For(t, sub, "the notification of e1").ID)

	var killed bool
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, s.appName).Scan(&killed))
	require.True(t, killed, "the listener's backend was terminated")
	testwait.For(t, lost, "the listener to see its connection die") // the listener saw the connection die and waits for the gate

	require.NoError(t, s.Append(ctx, ev("e2", "a", watchdog.KindResume, 1)))
	require.NoError(t, s.Append(ctx, ev("x1", "b", watchdog.KindResume, 1), ev("e3", "a", watchdog.KindCancel, 1)))
	close(gate)
	testwait.For(t, listening, "the listener to reconnect") // reconnected
	require.Equal(t, "e2", testwait.For(t, sub, "the notification of e2").ID)
	require.Equal(t, "e3", testwait.For(t, sub, "the notification of e3").ID)
	require.NoError(t, s.Append(ctx, ev("e4", "a", watchdog.KindResume, 2)))
	require.Equal(t, "e4", testwait.For(t, sub, "the notification of e4").ID, "notifications flow again after the reconnect")
	require.NoError(t, s.Close())
	_, open := testwait.Recv(t, sub, "Close to close the subscription")
	require.False(t, open)
}

// Two Watchdogs on two pools: the second cannot resume the window while
// its owner is alive, and takes it over once the owner's Close has released
// its lease (no wait for the lease to expire): session_started_at and the
// open window are read from the database, and the one cancel comes from
// the new owner, which a follower sees.
func TestAWindowPassesToAnotherWatchdogWhenItsOwnerCloses(t *testing.T) {
	ctx := context.Background()
	table := uniqueTable(t)
	store1 := newStore(t, testPool(t), WithTable(table))
	store2 := newStore(t, testPool(t), WithTable(table))
	mock := clock.NewMock()
	mock.Set(t0)
	policy := watchdog.Policy{WallClock: 10 * time.Second}

	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store1))
	t.Cleanup(func() { _ = w1.Close(ctx) })
	s1, err := w1.Start(ctx, "shared", t0, policy)
	require.NoError(t, err)
	require.NoError(t, w1.Check(ctx))

	require.NoError(t, watchdogtest.Advance(ctx, mock, 3*time.Second, w1))
	w2 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store2))
	t.Cleanup(func() { _ = w2.Close(ctx) })
	_, err = w2.Resume(ctx, "shared", policy)
	require.ErrorIs(t, err, watchdog.ErrAlreadyWatched, "its owner is alive")

	require.NoError(t, w1.Close(ctx))
	require.ErrorIs(t, context.Cause(s1.Context()), watchdog.ErrClosed)
	s2, err := w2.Resume(ctx, "shared", policy)
	require.NoError(t, err, "released: taken over at once")
	assert.Equal(t, t0, s2.StartedAt(), "session_started_at comes from the database")
	assert.Equal(t, 1, s2.Window())
	assert.Equal(t, t0, s2.Snapshot().WindowStartedAt, "the open window continues")

	follow, stop, err := watchdog.Follow(ctx, store2, "shared", watchdog.WithClock(mock))
	require.NoError(t, err)
	defer stop()

	require.NoError(t, watchdogtest.Advance(ctx, mock, 7*time.Second+time.Nanosecond, w2))
	require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrWallClockExceeded)
	testwait.For(t, follow.Done(), "the follower to see the new owner's verdict")
	require.ErrorIs(t, context.Cause(follow), watchdog.ErrWallClockExceeded)

	evs, err := store1.Load(ctx, "shared")
	require.NoError(t, err)
	cancels := 0
	for _, e := range evs {
		if e.Kind == watchdog.KindCancel {
			cancels++
			assert.Equal(t, t0.Add(10*time.Second+time.Nanosecond), e.FiredAt)
		}
		assert.Equal(t, t0, e.SessionStartedAt)
	}
	assert.Equal(t, 1, cancels, "exactly one cancel for window 1: %v", evs)
	require.NoError(t, w2.Close(ctx))
}

func TestFollowAcrossStores(t *testing.T) {
	ctx := context.Background()
	table := uniqueTable(t)
	supervisor := newStore(t, testPool(t), WithTable(table))
	worker := newStore(t, testPool(t), WithTable(table))
	require.NoError(t, supervisor.Append(ctx, ev("s1", "job", watchdog.KindStart, 1)))
	fctx, stop, err := watchdog.Follow(ctx, worker, "job")
	require.NoError(t, err)
	defer stop()
	require.NoError(t, fctx.Err())
	c := ev("c1", "job", watchdog.KindCancel, 1)
	c.Reason = "wall_clock_exceeded"
	require.NoError(t, supervisor.Append(ctx, c))
	testwait.For(t, fctx.Done(), "the follower to see the cancel")
	var v *watchdog.VerdictError
	require.True(t, errors.As(context.Cause(fctx), &v))
	assert.Equal(t, "watchdog_wall_clock_exceeded", v.StopReasonCode())
}

// PostgreSQL text cannot hold NUL bytes or invalid UTF-8: refused as
// invalid (for good), not as a transient error the recorder would retry.
func TestRefusesIdsPostgreSQLCannotStore(t *testing.T) {
	s := newStore(t, testPool(t), WithTable(uniqueTable(t)))
	for _, e := range []watchdog.Event{
		ev("e\x00", "a", watchdog.KindStart, 1),
		ev("e1", "a\xfe", watchdog.KindStart, 1),
		ev("e1", "a", "kind\xff", 1),
		ev("e1", "a", watchdog.KindStart, 1<<31),
	} {
		require.ErrorIs(t, s.Append(context.Background(), e), watchdog.ErrInvalidEvent)
	}
}
