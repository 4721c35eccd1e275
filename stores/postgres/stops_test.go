package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Remote stop (issue 38), with real processes on the real PostgreSQL: an
// owner process ("fleetowner") runs sessions, the test requests their stop
// as a PostgreSQL role (RequestStop) and waits for the answer (WaitStop);
// the owner process prints when each session's context ended and why.
const (
	envUser      = "WATCHDOG_PG_TEST_USER"       // the child connects as this role
	envNoMigrate = "WATCHDOG_PG_TEST_NO_MIGRATE" // the child opens the store WithoutMigration
	envContinue  = "WATCHDOG_PG_TEST_CONTINUE"   // fleetowner: ContinueWhenOwnerLost
)

// runAdopter is a fleet member WithAdoption under a lease of envLease: it
// prints READY and runs until its standard input ends.
func runAdopter(ctx context.Context, store *Store) int {
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	w := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption(), watchdog.WithLease(lease))
	fmt.Println("READY")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	if err := w.Close(ctx); err != nil {
		fmt.Println("ERROR", err)
		return 3
	}
	return 0
}

// stopAndWait requests the stop of id as pool's role and waits for the
// answer (at most a minute: a guard, not a pace).
func stopAndWait(t *testing.T, pool *pgxpool.Pool, table, id, why string) (StopRequest, StopRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RequestStop(ctx, pool, id, why, WithTable(table))
	require.NoError(t, err)
	a, err := WaitStop(ctx, pool, r.ID, WithTable(table))
	require.NoError(t, err, "waiting for the answer to request %d (%+v)", r.ID, r)
	return r, a
}

func sessionUser(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var u string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT session_user`).Scan(&u))
	return u
}

// lastEvent returns the session's last event.
func lastEvent(t *testing.T, store *Store, id string) watchdog.Event {
	t.Helper()
	evs, err := store.Load(context.Background(), id)
	require.NoError(t, err)
	require.NotEmpty(t, evs, "session %s has no events", id)
	return evs[len(evs)-1]
}

// ownerProcess starts an owner process ("fleetowner") of n sessions s0,
// s1, ... (budget 1 h, lease 6 s unless env says otherwise) on a table of
// its own, and waits for it to be ready.
func ownerProcess(t *testing.T, n int, env ...string) (*pgxpool.Pool, string, *Store, *child) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	pool := testPool(t)
	table := uniqueTable(t)
	store := newStore(t, pool, WithTable(table))
	env = append([]string{envFleetN + "=" + fmt.Sprint(n), envLease + "=6s", envBudget + "=1h"}, env...)
	owner := startChild(t, "owner", "fleetowner", table, "s", env...)
	owner.expect("READY")
	return pool, table, store, owner
}

func TestARemoteStopEndsTheWindowInItsOwnerProcessAsStopByDoes(t *testing.T) {
	pool, table, store, owner := ownerProcess(t, 1)
	follower := startChild(t, "follower", "worker", table, "s0")
	follower.expect("READY")
	me := sessionUser(t, pool)

	why := "runaway: 400 tool calls in a loop"
	r, a := stopAndWait(t, pool, table, "s0", why)
	assert.Equal(t, StopPending, r.State, "the owner answers it, not the database")
	assert.Equal(t, me, r.RequestedBy, "the role PostgreSQL authenticated")
	assert.Equal(t, 1, r.Window)
	assert.NotEmpty(t, r.Owner)
	assert.False(t, r.OwnerLeaseExpired)
	assert.Equal(t, StopStopped, a.State, "answer: %+v", a)
	assert.Equal(t, r.Owner, a.AnsweredBy)

	ended := owner.expect("ENDED s0 ")
	assert.Contains(t, ended, watchdog.ErrSessionStopped.Error()+" by "+me+": "+why, "the cause StopBy gives")
	assert.Equal(t, "STOP "+watchdog.StopCompleted, follower.expect("STOP"), "the follower sees a stop as any other")
	follower.wait()
	owner.wait()

	stop := lastEvent(t, store, "s0")
	assert.Equal(t, watchdog.KindStop, stop.Kind)
	assert.Equal(t, watchdog.StopRequested, stop.Reason)
	assert.Equal(t, me, stop.By)
	assert.Equal(t, why, stop.Why)
	assert.Equal(t, r.Owner, stop.Owner)

	// Once ended, a request is answered at once, saying how it ended.
	again, err := RequestStop(context.Background(), pool, "s0", "again", WithTable(table))
	require.NoError(t, err)
	assert.Equal(t, StopEnded, again.State)
	assert.Contains(t, again.Detail, "window 1 had already ended: "+watchdog.KindStop+" stop_requested by "+me+" ("+why+")")
}

func TestStoppingASessionNoMemberOpenedSaysSo(t *testing.T) {
	pool := testPool(t)
	table := uniqueTable(t)
	newStore(t, pool, WithTable(table))
	r, err := RequestStop(context.Background(), pool, "nobody-knows", "check", WithTable(table))
	require.NoError(t, err)
	assert.Equal(t, StopUnknown, r.State)
	assert.True(t, r.Answered())
	assert.Equal(t, "no fleet member has opened a window of this session", r.Detail)

	_, err = RequestStop(context.Background(), pool, "x", "", WithTable(table))
	assert.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	_, err = RequestStop(context.Background(), pool, "x", strings.Repeat("y", 1025), WithTable(table))
	assert.ErrorIs(t, err, watchdog.ErrInvalidArgument)
}

func TestTwoOperatorsStoppingOneSessionRecordOneStop(t *testing.T) {
	pool, table, store, owner := ownerProcess(t, 1)
	ops := []*pgxpool.Pool{rolePool(t, pool, "op1_"+table, table), rolePool(t, pool, "op2_"+table, table)}

	answers := make([]StopRequest, 2)
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Go(func() { _, answers[i] = stopAndWait(t, op, table, "s0", fmt.Sprint("operator ", i+1)) })
	}
	wg.Wait()
	states := []string{answers[0].State, answers[1].State}
	assert.ElementsMatch(t, []string{StopStopped, StopEnded}, states, "answers: %+v", answers)
	owner.expect("ENDED s0 ")
	owner.wait()
	kinds, evs := loadKinds(t, store, "s0")
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds, "one stop recorded")
	winner := answers[0]
	if winner.State != StopStopped {
		winner = answers[1]
	}
	assert.Equal(t, winner.RequestedBy, evs[len(evs)-1].By, "the stop names the operator whose request won")
}

func TestAStopOfASessionWhoseOwnerIsGoneIsAnsweredByTheMemberThatAdoptsIt(t *testing.T) {
	pool, table, store, owner := ownerProcess(t, 1, envLease+"=1s", envContinue+"=1")
	owner.kill()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RequestStop(ctx, pool, "s0", "its orchestrator died", WithTable(table))
	require.NoError(t, err)
	assert.Equal(t, StopPending, r.State, "nobody answers until a member adopts the window")

	adopter := startChild(t, "adopter", "adopter", table, "", envLease+"=1s")
	adopter.expect("READY")
	a, err := WaitStop(ctx, pool, r.ID, WithTable(table))
	require.NoError(t, err)
	assert.Equal(t, StopStopped, a.State, "answer: %+v", a)
	assert.NotEqual(t, r.Owner, a.AnsweredBy, "answered by the adopter")
	t.Logf("request -> stopped by the adopter: %v (the owner's lease: 1 s; the adopter starts after the request)", a.AnsweredAt.Sub(a.RequestedAt))
	require.NoError(t, adopter.stdin.Close())
	adopter.wait()

	_, evs := loadKinds(t, store, "s0")
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind+"("+e.Reason+")")
	}
	assert.Equal(t, []string{watchdog.KindStart + "()", watchdog.KindResume + "(" + watchdog.StopOwnerLost + ")", watchdog.KindStop + "(" + watchdog.StopRequested + ")"}, kinds)
	assert.Equal(t, a.AnsweredBy, evs[2].Owner)
	assert.Equal(t, r.Owner, evs[1].AdoptedFrom)
}

func TestNewWithoutMigrationRefusesAMissingSchemaNamingTheTable(t *testing.T) {
	pool := testPool(t)
	table := uniqueTable(t)
	_, err := New(context.Background(), pool, WithTable(table), WithoutMigration())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `table "`+table+`" does not exist`)
	assert.Contains(t, err.Error(), "run Migrate")
}

// rolePool creates role (LOGIN) with the operator's grants on table's
// tables, and returns a pool that connects as it; the role is dropped at
// the end of the test.
func rolePool(t *testing.T, admin *pgxpool.Pool, role, table string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = admin.Exec(context.Background(), `DROP ROLE `+role)
	})
	for _, g := range grants(table, "", role) {
		_, err := admin.Exec(ctx, g)
		require.NoError(t, err, g)
	}
	p, err := pgxpool.New(ctx, os.Getenv(envDSN)+" user="+role)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// grants are the statements of docs/stopping.md that give member (if not
// empty) a fleet member's rights on table's tables and operator (if not
// empty) an operator's.
func grants(table, member, operator string) []string {
	n := newNames(table)
	sn := newStopNames(&n)
	var g []string
	if schema, _, ok := strings.Cut(table, "."); ok {
		for _, r := range []string{member, operator} {
			if r != "" {
				g = append(g, `GRANT USAGE ON SCHEMA `+schema+` TO `+r)
			}
		}
	}
	if member != "" {
		g = append(g,
			`GRANT SELECT, INSERT ON `+n.table+` TO `+member,
			`GRANT SELECT, INSERT, UPDATE ON `+n.windows+` TO `+member,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON `+n.leases+` TO `+member,
			`GRANT SELECT, UPDATE (state, answered_by, answered_at, detail) ON `+sn.table+` TO `+member)
	}
	if operator != "" {
		g = append(g,
			`GRANT SELECT ON `+n.table+`, `+n.windows+`, `+n.leases+`, `+sn.table+` TO `+operator,
			`GRANT INSERT (aggregate_id, why) ON `+sn.table+` TO `+operator)
	}
	return g
}

// refused requires err to be PostgreSQL's insufficient_privilege.
func refused(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want a permission error, got %v", what, err)
	assert.Equal(t, "42501", pgErr.Code, "%s: %v", what, err)
}

// The three roles of docs/stopping.md, as real separate roles: the
// migrating role owns the schema and migrates it; the fleet member opens
// the store without DDL and runs sessions; the operator stops them and
// can do nothing else that changes anything.
func TestAnOperatorCanRequestStopsAndReadButCannotForgeChangeOrDeleteEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	admin := testPool(t)
	ctx := context.Background()
	schema := uniqueTable(t)
	mig, mem, op := schema+"_migrate", schema+"_member", schema+"_operator"
	for _, r := range []string{mig, mem, op} {
		_, err := admin.Exec(ctx, `CREATE ROLE `+r+` LOGIN`)
		require.NoError(t, err)
	}
	_, err := admin.Exec(ctx, `CREATE SCHEMA `+schema+` AUTHORIZATION `+mig)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		for _, r := range []string{mig, mem, op} {
			_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+r)
			_, _ = admin.Exec(context.Background(), `DROP ROLE `+r)
		}
	})
	as := func(role string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, os.Getenv(envDSN)+" user="+role)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	table := schema + ".events"
	migPool, memPool, opPool := as(mig), as(mem), as(op)

	require.NoError(t, Migrate(ctx, migPool, WithTable(table)))
	for _, g := range grants(table, mem, op) {
		_, err := migPool.Exec(ctx, g)
		require.NoError(t, err, g)
	}
	_, err = New(ctx, memPool, WithTable(table))
	refused(t, err, "a member migrating") // the member cannot change the schema...
	owner := startChild(t, "owner", "fleetowner", table, "s", envUser+"="+mem, envNoMigrate+"=1",
		envFleetN+"=2", envLease+"=6s", envBudget+"=1h")
	owner.expect("READY") // ...and runs sessions without it

	n := newNames(table)
	sn := newStopNames(&n)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	forged := `{"event_id":"forged","aggregate_id":"s0","event_kind":"cancel","window":1,"reason":"watchdog_wall_clock_exceeded","occurred_at":"` + now + `"}`
	for what, stmt := range map[string]string{
		"append a forged verdict (an ownerless event)": `INSERT INTO ` + n.table + ` (event_id, aggregate_id, event_kind, window_number, terminal, event) VALUES ('forged', 's0', 'cancel', 1, true, '` + forged + `')`,
		"change a recorded event":                      `UPDATE ` + n.table + ` SET event_kind = 'cancel' WHERE aggregate_id = 's0'`,
		"delete a recorded event":                      `DELETE FROM ` + n.table + ` WHERE aggregate_id = 's0'`,
		"take a window over":                           `UPDATE ` + n.windows + ` SET owner = 'me'`,
		"forge a lease":                                `INSERT INTO ` + n.leases + ` (owner, expires_at, last_seen) VALUES ('me', now(), now())`,
		"stop a session under another name":            `INSERT INTO ` + sn.table + ` (aggregate_id, why, requested_by) VALUES ('s0', 'x', '` + mem + `')`,
		"answer a stop request":                        `UPDATE ` + sn.table + ` SET state = 'stopped'`,
	} {
		_, err := opPool.Exec(ctx, stmt)
		refused(t, err, what)
	}

	// A bare NOTIFY on the owners' channel, naming s0, is ignored: the
	// owner reads the request rows, and there is none for s0. The stop of
	// s1 requested next is the first one the owner carries out.
	_, err = opPool.Exec(ctx, `SELECT pg_notify($1, 's0'), pg_notify($2, 's0')`, sn.channel, n.channel)
	require.NoError(t, err, "anyone may notify")
	_, a := stopAndWait(t, opPool, table, "s1", "by the book")
	assert.Equal(t, StopStopped, a.State)
	assert.Contains(t, owner.expect("ENDED "), "ENDED s1 ", "s0 still runs")

	// Even the table's owner, who may write requested_by, is recorded as
	// who it is.
	var by string
	require.NoError(t, migPool.QueryRow(ctx, `INSERT INTO `+sn.table+` (aggregate_id, why, requested_by) VALUES ('s0', 'as someone else', 'alice') RETURNING requested_by`).Scan(&by))
	assert.Equal(t, mig, by)
	owner.expect("ENDED s0 ")
	owner.wait()

	store := newStore(t, admin, WithTable(table), WithoutMigration())
	assert.Equal(t, op, lastEvent(t, store, "s1").By)
	assert.Equal(t, mig, lastEvent(t, store, "s0").By)
	for _, id := range []string{"s0", "s1"} {
		kinds, _ := loadKinds(t, store, id)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindStop}, kinds, "%s: nothing forged", id)
	}
}
