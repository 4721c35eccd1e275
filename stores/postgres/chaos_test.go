package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// The chaos test runs a fleet: several orchestrator processes ("members",
// each a Watchdog with adoption and the default lease) share one table,
// and a follower process follows every session. The parent hands sessions
// out to the members, SIGKILLs and restarts members, SIGSTOPs one past its
// lease and resumes it, and stalls the database for 2 s, then checks the
// whole table. It runs for WATCHDOG_CHAOS_SECONDS (default 25; CI runs the
// default, scripts/chaos longer runs).
//
// A member reads commands on stdin: "START id kind budget" starts a
// session whose simulated agent is one of
//
//	done     stops itself (completed) before its budget
//	busy     writes output until the wall clock ends the window
//	silent   writes nothing: the idle rule ends it
//	remote   runs elsewhere and writes output until its owner is lost:
//	         ContinueWhenOwnerLost, an idle window of 3 s that the adopter
//	         continues from the owner's last evidence checkpoint
//
// "DRAIN" makes it start nothing more and print "DRAINED" once every Start
// in progress has returned; it goes on watching (and adopting) until "EXIT"
// (or the end of stdin), then waits for its sessions to end, Closes, prints
// "LAG maxms" (its recorder's lag) and exits. Its owner id is the
// WATCHDOG_PG_TEST_OWNER variable (the event id prefix).

const (
	envOwner = "WATCHDOG_PG_TEST_OWNER"
)

func chaosPolicy(kind string, budget time.Duration) watchdog.Policy {
	p := watchdog.Policy{WallClock: budget}
	switch kind {
	case "silent":
		p.IdleWindow, p.SettleChecks, p.SettleInterval = time.Second, 2, 500*time.Millisecond
	case "remote":
		p.ContinueWhenOwnerLost = true
		p.IdleWindow, p.SettleChecks = 3*time.Second, 1
	}
	return p
}

func runMember(ctx context.Context, store *Store) int {
	// Warnings and errors go to stderr, which the test shows: a failed
	// adoption or a refused write says so there.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", os.Getenv(envOwner))
	w := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption(), watchdog.WithSlog(log),
		watchdog.WithEventIDPrefix(os.Getenv(envOwner)+"-"))
	var (
		mu       sync.Mutex
		maxLag   time.Duration
		wg       sync.WaitGroup
		starting sync.WaitGroup
	)
	stopSampling := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				lag := w.Stats().OldestQueued
				mu.Lock()
				maxLag = max(maxLag, lag)
				mu.Unlock()
			}
		}
	}()
	out := make(chan string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for line := range out {
			fmt.Println(line)
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	draining := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "EXIT" {
			break
		}
		if len(f) == 1 && f[0] == "DRAIN" {
			draining = true
			starting.Wait()
			out <- "DRAINED"
			continue
		}
		if draining || len(f) != 4 || f[0] != "START" {
			continue
		}
		id, kind := f[1], f[2]
		budget, _ := time.ParseDuration(f[3])
		starting.Add(1)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			s, err := w.Start(sctx, id, time.Now(), chaosPolicy(kind, budget))
			starting.Done()
			if err != nil {
				out <- "FAILED " + id + " " + strings.ReplaceAll(err.Error(), "\n", " ")
				return
			}
			switch kind {
			case "done":
				select {
				case <-time.After(budget / 2):
					_ = s.Stop()
				case <-s.Context().Done():
				}
			case "busy", "remote":
				t := time.NewTicker(200 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-t.C:
						s.Touch(watchdog.ChannelStdout)
						continue
					case <-s.Context().Done():
					}
					break
				}
			default:
				<-s.Context().Done()
			}
		})
	}
	wg.Wait()
	close(stopSampling)
	err := w.Close(ctx)
	close(out)
	<-done
	if err != nil {
		fmt.Println("ERROR", err)
		return 3
	}
	mu.Lock()
	fmt.Println("LAG", maxLag.Milliseconds())
	mu.Unlock()
	return 0
}

// runFollower follows every session named on stdin ("FOLLOW id") and prints
// "ENDED id cause" when its window ends.
func runFollower(ctx context.Context, store *Store) int {
	var mu sync.Mutex
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "FOLLOW" {
			continue
		}
		id := f[1]
		fctx, _, err := watchdog.Follow(ctx, store, id)
		if err != nil {
			fmt.Println("ERROR", id, err)
			return 2
		}
		go func() {
			<-fctx.Done()
			mu.Lock()
			fmt.Println("ENDED", id, strings.ReplaceAll(context.Cause(fctx).Error(), " ", "_"))
			mu.Unlock()
		}()
	}
	select {} // until killed
}

// member is one orchestrator process of the chaos test and its output.
type member struct {
	slot    int
	owner   string
	cmd     *exec.Cmd
	in      *bufio.Writer
	inClose func() error
	lines   chan string
	drained chan struct{}
	alive   bool
}

type chaos struct {
	t      *testing.T
	table  string
	mu     sync.Mutex
	lost   map[string]time.Time // owner -> when it was killed or stopped
	lags   []int64
	failed []string
	gen    int
}

func (c *chaos) start(slot int) *member {
	c.mu.Lock()
	c.gen++
	owner := fmt.Sprintf("m%d.%d", slot, c.gen)
	c.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //watchdog:unbounded the test kills, stops and waits for its members
	cmd.Env = append(os.Environ(), envRole+"=member", envTable+"="+c.table, envOwner+"="+owner)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(c.t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(c.t, err)
	require.NoError(c.t, cmd.Start())
	m := &member{slot: slot, owner: owner, cmd: cmd, in: bufio.NewWriter(stdin), inClose: stdin.Close,
		lines: make(chan string, 64), drained: make(chan struct{}), alive: true}
	go func() {
		defer close(m.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			switch {
			case line == "DRAINED":
				close(m.drained)
			case strings.HasPrefix(line, "LAG "):
				n, _ := strconv.ParseInt(strings.TrimPrefix(line, "LAG "), 10, 64)
				c.lags = append(c.lags, n)
			case strings.HasPrefix(line, "FAILED "), strings.HasPrefix(line, "ERROR "):
				c.failed = append(c.failed, owner+": "+line)
			}
			c.mu.Unlock()
		}
	}()
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return m
}

func (c *chaos) kill(m *member) {
	c.mu.Lock()
	c.lost[m.owner] = time.Now()
	c.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.alive = false
}

// stall holds every table of the store for d: appends, heartbeats and
// adoption sweeps all wait. Its LOCK TABLE takes the three tables one after
// the other while the members' transactions hold some of them, so
// PostgreSQL may pick it as a deadlock's victim: it then tries again.
func stall(ctx context.Context, t *testing.T, table string, d time.Duration) {
	pool := testPool(t)
	n := newNames(table)
	for attempt := 1; ; attempt++ {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `LOCK TABLE `+n.table+`, `+n.windows+`, `+n.leases+` IN ACCESS EXCLUSIVE MODE`)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" && attempt < 10 {
			_ = tx.Rollback(ctx)
			continue
		}
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT pg_sleep($1)`, d.Seconds())
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return
	}
}

func TestChaosFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet of processes for half a minute")
	}
	seconds := 25
	if v, err := strconv.Atoi(os.Getenv("WATCHDOG_CHAOS_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	const members = 3
	ctx := context.Background()
	pool := testPool(t)
	table := uniqueTable(t)
	store := newStore(t, pool, WithTable(table))
	c := &chaos{t: t, table: table, lost: map[string]time.Time{}}

	follower := startChild(t, "follower", "follower", table, "")
	var fleet [members]*member
	for i := range fleet {
		fleet[i] = c.start(i)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kinds := []string{"done", "busy", "silent", "remote"}
	var ids []string
	began := time.Now()
	end := began.Add(time.Duration(seconds) * time.Second)
	nextKill := began.Add(4 * time.Second)
	stopAt, stalled := began.Add(time.Duration(seconds)*time.Second/3), false
	stallAt := began.Add(2 * time.Duration(seconds) * time.Second / 3)
	var stopped *member
	var contAt time.Time
	stallDone := make(chan struct{})
	for n := 0; time.Now().Before(end); n++ {
		now := time.Now()
		// Chaos first.
		if now.After(nextKill) {
			i := rng.IntN(members)
			if fleet[i] != stopped {
				c.kill(fleet[i])
				fleet[i] = c.start(i)
			}
			nextKill = now.Add(time.Duration(3000+rng.IntN(3000)) * time.Millisecond)
		}
		if stopped == nil && now.After(stopAt) {
			stopped = fleet[(1+rng.IntN(members-1))%members]
			c.mu.Lock()
			c.lost[stopped.owner] = now
			c.mu.Unlock()
			require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGSTOP))
			contAt = now.Add(watchdog.DefaultLeaseTTL + 2*time.Second)
		}
		if stopped != nil && !contAt.IsZero() && now.After(contAt) {
			require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGCONT))
			contAt = time.Time{}
		}
		if !stalled && now.After(stallAt) {
			stalled = true
			go func() { defer close(stallDone); stall(ctx, t, table, 2*time.Second) }()
		}
		// One session for a live member that is not stopped.
		m := fleet[rng.IntN(members)]
		if m == stopped && !contAt.IsZero() {
			time.Sleep(5 * time.Millisecond) // the parent's own pace, not a wait for the library
			continue
		}
		id := fmt.Sprintf("s%d", n)
		kind := kinds[rng.IntN(len(kinds))]
		budget := time.Duration(2000+rng.IntN(3000)) * time.Millisecond
		if _, err := fmt.Fprintf(follower.stdin, "FOLLOW %s\n", id); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(m.in, "START %s %s %s\n", id, kind, budget)
		_ = m.in.Flush()
		ids = append(ids, id)
		time.Sleep(10 * time.Millisecond) // the parent's own pace, not a wait for the library
	}
	if !contAt.IsZero() {
		require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGCONT))
	}
	if stalled {
		testwait.For(t, stallDone, "the stalled member's stall to end")
	}
	// The members start nothing more; once every Start in progress has
	// returned, the table holds every session there will be.
	for _, m := range fleet {
		fmt.Fprintln(m.in, "DRAIN")
		_ = m.in.Flush()
	}
	for _, m := range fleet {
		select {
		case <-m.drained:
		case <-time.After(time.Minute): // a guard against a hung member, not a wait for it
			// Its goroutines, on stderr, for the post-mortem: which Start
			// did not return, and where it waits.
			_ = m.cmd.Process.Signal(syscall.SIGQUIT)
			_ = m.cmd.Wait()
			t.Fatalf("member %s did not drain in a minute (its goroutine dump is above)", m.owner)
		}
	}

	// Every session the table knows ends (the members still run, so the
	// windows of the owners lost last are adopted), and its follower sees
	// it. Then the members exit.
	var started []string
	rows, err := pool.Query(ctx, `SELECT DISTINCT aggregate_id FROM `+newNames(table).table)
	require.NoError(t, err)
	started, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	want := map[string]bool{}
	for _, id := range started {
		want[id] = true
	}
	for len(want) > 0 {
		line := follower.expect("ENDED ")
		delete(want, strings.Fields(line)[1])
	}
	_ = follower.cmd.Process.Kill()
	for _, m := range fleet {
		fmt.Fprintln(m.in, "EXIT")
		_ = m.in.Flush()
		_ = m.inClose()
	}
	for _, m := range fleet {
		testwait.For(t, testwait.Returns(func() {
			_ = m.cmd.Wait()
			for range m.lines {
			}
		}), "member "+m.owner+" to exit")
	}
	elapsed := time.Since(began)

	// The whole table: one terminal per window, replay finds nothing wrong,
	// no false takeover, and the adoption latency.
	var (
		events     int
		adoptions  int
		falseTakes []string
		latencies  []time.Duration
	)
	for _, id := range started {
		evs, err := store.Load(ctx, id)
		require.NoError(t, err)
		events += len(evs)
		terminals := map[int][]watchdog.Event{}
		for _, e := range evs {
			if e.Terminal() {
				terminals[e.Window] = append(terminals[e.Window], e)
			}
		}
		windows := map[int]bool{}
		for _, e := range evs {
			windows[e.Window] = true
		}
		for w := range windows {
			if len(terminals[w]) != 1 { // say what the window's records hold, for the post-mortem
				var b strings.Builder
				for _, e := range evs {
					fmt.Fprintf(&b, "\n  w%d %s owner=%s reason=%s adopted_from=%s at %s", e.Window, e.Kind, e.Owner, e.Reason, e.AdoptedFrom, e.OccurredAt.Format(time.RFC3339Nano))
				}
				n := newNames(table)
				var owner string
				var open bool
				var claimed time.Time
				if err := pool.QueryRow(ctx, `SELECT owner, open, claimed_at FROM `+n.windows+` WHERE aggregate_id = $1 AND window_number = $2`, id, w).Scan(&owner, &open, &claimed); err != nil {
					fmt.Fprintf(&b, "\n  windows row: %v", err)
				} else {
					fmt.Fprintf(&b, "\n  windows row: owner=%s open=%v claimed_at=%s", owner, open, claimed.Format(time.RFC3339Nano))
				}
				rows, err := pool.Query(ctx, `SELECT owner, expires_at, last_seen, now() FROM `+n.leases+` ORDER BY owner`)
				if err == nil {
					for rows.Next() {
						var o string
						var exp, seen, now time.Time
						if rows.Scan(&o, &exp, &seen, &now) == nil {
							fmt.Fprintf(&b, "\n  lease %s expires %s last_seen %s (db now %s)", o, exp.Format(time.RFC3339Nano), seen.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
						}
					}
					rows.Close()
				}
				t.Fatalf("session %s window %d: %d terminal events, want 1; its events:%s", id, w, len(terminals[w]), b.String())
			}
		}
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		require.Empty(t, mm, "session %s: replay", id)
		last := map[int]watchdog.Event{} // each window's last adoption
		for _, e := range evs {
			if e.AdoptedFrom != "" {
				adoptions++
				last[e.Window] = e
			}
		}
		for _, e := range last {
			c.mu.Lock()
			lostAt, ok := c.lost[e.AdoptedFrom]
			c.mu.Unlock()
			if !ok {
				falseTakes = append(falseTakes, fmt.Sprintf("%s window %d from %s", id, e.Window, e.AdoptedFrom))
				continue
			}
			verdict := terminals[e.Window][0]
			due := lostAt
			if e.Policy != nil && e.Policy.ContinueWhenOwnerLost {
				if deadline := e.WindowStartedAt.Add(e.Policy.WallClock); deadline.After(due) {
					due = deadline
				}
			}
			latencies = append(latencies, verdict.OccurredAt.Sub(due))
			if os.Getenv("WATCHDOG_CHAOS_DEBUG") != "" && verdict.OccurredAt.Sub(due) > 9*time.Second {
				t.Logf("slow: %s w%d from %s lost %s adopted %s (last seen %s) verdict %s %s by %s",
					id, e.Window, e.AdoptedFrom, lostAt.Format("15:04:05.000"), e.OccurredAt.Local().Format("15:04:05.000"),
					e.OwnerLastSeen.Local().Format("15:04:05.000"), verdict.OccurredAt.Local().Format("15:04:05.000"), verdict.Kind, verdict.Owner)
			}
		}
	}
	slices.Sort(latencies)
	q := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(p*float64(len(latencies)-1))]
	}
	c.mu.Lock()
	lags := slices.Clone(c.lags)
	failed := slices.Clone(c.failed)
	lost := len(c.lost)
	c.mu.Unlock()
	slices.Sort(lags)
	t.Logf("chaos: %s, %d members, %d owners lost (killed or stopped), %d sessions dispatched, %d in the table, %d events (%.0f/s)",
		elapsed.Round(time.Second), members, lost, len(ids), len(started), events, float64(events)/elapsed.Seconds())
	t.Logf("chaos: %d adoptions; verdict after the owner's loss (or the deadline): p50 %v, p99 %v, max %v; false takeovers %d",
		adoptions, q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), q(1).Round(time.Millisecond), len(falseTakes))
	t.Logf("chaos: recorder lag (max per member that drained): %v ms; starts refused or failed: %d", lags, len(failed))
	require.Empty(t, falseTakes, "no window adopted from an owner that was alive")
	require.NotZero(t, adoptions, "the chaos lost owners with open windows")
	// The target, p99 at most 10 s, is checked by scripts/chaos (which sets
	// WATCHDOG_CHAOS_SECONDS) on a machine it has to itself; beside other
	// test binaries on two cores, the bound is three times
	// it: enough to catch adoption that stalls, not a busy machine.
	bound := 30 * time.Second
	if os.Getenv("WATCHDOG_CHAOS_SECONDS") != "" {
		bound = 10 * time.Second
	}
	require.LessOrEqual(t, q(0.99), bound, "adoption: p99 at most %v", bound)
}
