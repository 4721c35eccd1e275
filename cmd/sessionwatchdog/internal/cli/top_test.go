//go:build unix

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/pgtest"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/live"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

// The top tests run the command, and the owners it lists, as processes of
// their own: this test binary re-executed in a role (topRole, dispatched
// by TestMain).
const (
	envTopRole     = "SESSIONWATCHDOG_TOP_TEST_ROLE" // "cmd": sessionwatchdog; "owner": a fleet member
	envTopDSN      = "SESSIONWATCHDOG_TOP_TEST_DSN"
	envTopTable    = "SESSIONWATCHDOG_TOP_TEST_TABLE"
	envTopSessions = "SESSIONWATCHDOG_TOP_TEST_SESSIONS" // id=wallclock[/idle],... started by an owner
	envTopCall     = "SESSIONWATCHDOG_TOP_TEST_CALL"     // session=name: an owner begins this call and keeps it in flight
	envTopLease    = "SESSIONWATCHDOG_TOP_TEST_LEASE"
	envTopEvents   = "SESSIONWATCHDOG_TOP_TEST_CHECKPOINT_EVENTS" // an owner also records checkpoint events this often
)

// topRole runs this process in its role; ok is false without one.
func topRole() (code int, ok bool) {
	switch os.Getenv(envTopRole) {
	case "cmd":
		return Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr), true
	case "owner":
		if err := runOwner(); err != nil {
			fmt.Println("ERROR", err)
			return 2, true
		}
		return 0, true
	}
	return 0, false
}

// runOwner is a fleet member: it starts the sessions envTopSessions names
// on the PostgreSQL store, with evidence on stdout, prints "READY owner",
// and holds them open until its stdin closes.
func runOwner() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envTopDSN))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.WithTable(os.Getenv(envTopTable)))
	if err != nil {
		return err
	}
	defer store.Close()
	lease, _ := time.ParseDuration(os.Getenv(envTopLease))
	every, _ := time.ParseDuration(os.Getenv(envTopEvents))
	w := watchdog.New(watchdog.WithStore(store), watchdog.WithLease(lease), watchdog.WithCheckpoints(every))
	defer w.Close(ctx)
	var first *watchdog.Session
	byID := map[string]*watchdog.Session{}
	for _, spec := range strings.Split(os.Getenv(envTopSessions), ",") {
		id, budgets, _ := strings.Cut(spec, "=") // id=wallclock[/idle]
		wall, idle, _ := strings.Cut(budgets, "/")
		p := watchdog.Policy{}
		if p.WallClock, err = time.ParseDuration(wall); err != nil {
			return err
		}
		if idle != "" {
			if p.IdleWindow, err = time.ParseDuration(idle); err != nil {
				return err
			}
		}
		s, err := w.Start(ctx, id, time.Now(), p)
		if err != nil {
			return err
		}
		s.Touch(watchdog.ChannelStdout)
		byID[id] = s
		if first == nil {
			first = s
		}
	}
	if spec := os.Getenv(envTopCall); spec != "" { // in flight until the process ends
		id, name, _ := strings.Cut(spec, "=")
		s := byID[id]
		if s == nil {
			return fmt.Errorf("%s: no session %q", envTopCall, id)
		}
		h, err := watchdog.Begin(s.Context(), name, watchdog.CallLimits{Cap: 30 * time.Minute})
		if err != nil {
			return err
		}
		defer h.End(nil)
	}
	if err := w.Check(ctx); err != nil {
		return err
	}
	evs, err := store.Load(ctx, first.ID())
	if err != nil || len(evs) == 0 {
		return fmt.Errorf("load %s: %v (%d events)", first.ID(), err, len(evs))
	}
	fmt.Println("READY", evs[0].Owner)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// listen LISTENs on table's live channel on a connection of its own.
func listen(t *testing.T, dsn, table string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{postgres.LiveChannel(table)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// awaitCheckpoints waits, at most testwait.Bound, for the owners'
// heartbeats to have kept a checkpoint of each of the n windows open on
// table: after each notification on conn, it reads the list again. (An
// owner's first heartbeat precedes its first start and carries none.)
func awaitCheckpoints(t *testing.T, conn *pgx.Conn, pool *pgxpool.Pool, table string, n int, owners ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no checkpoint of each of %d windows on %s within %v: %v", n, postgres.LiveChannel(table), testwait.Bound, err)
		}
		if !slices.Contains(owners, note.Payload) {
			t.Fatalf("a notification from %q, none of the owners %v", note.Payload, owners)
		}
		l, err := postgres.ReadLive(ctx, pool, table, live.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for _, r := range l.Rows {
			if r.Freshest != "" {
				kept++
			}
		}
		if kept == n {
			return
		}
	}
}

// owner is a fleet member process (runOwner).
type owner struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	id    string // its owner id, as it printed it
}

// startOwner starts an owner of sessions (id=wallclock,...) on table and
// waits for it to be ready; it ends when the test does.
func startOwner(t *testing.T, dsn, table, sessions string, env ...string) *owner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //watchdog:unbounded ended by closing its stdin at cleanup, killed if it does not end
	cmd.Env = append(os.Environ(), envTopRole+"=owner", envTopDSN+"="+dsn, envTopTable+"="+table, envTopSessions+"="+sessions,
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &owner{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { o.end(t) })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	line := testwait.For(t, lines, "the owner process to start its sessions")
	id, ok := strings.CutPrefix(line, "READY ")
	if !ok {
		t.Fatalf("the owner process said %q", line)
	}
	o.id = id
	return o
}

// end closes the owner's stdin and waits for it to exit, at most
// testwait.Bound, then kills it.
func (o *owner) end(t *testing.T) {
	_ = o.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- o.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(testwait.Bound):
		_ = o.cmd.Process.Kill()
		<-done
		t.Errorf("the owner process %d did not end within %v of its stdin's close", o.cmd.Process.Pid, testwait.Bound)
	}
}

// topProcess runs "sessionwatchdog ARGS..." as a process of its own, to
// its end, within testwait.Bound.
func topProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envTopRole+"=cmd", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("sessionwatchdog %s: %v (stderr %q)", strings.Join(args, " "), err, errb.String())
	}
	return code, out.String(), errb.String()
}

// topJSON is one refresh of "top --json", parsed.
func topJSON(t *testing.T, out string) []live.List {
	t.Helper()
	var ls []live.List
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var l live.List
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("a refresh is not one JSON document on one line: %v: %q", err, line)
		}
		ls = append(ls, l)
	}
	return ls
}

// Two owner processes on one PostgreSQL store: top, a third process, lists
// every open window of both, each under an owner that names its host and
// its process id, with its budget, sorted by the earliest stop.
func TestTopListsEveryOpenWindowOfTwoOwnerProcessesUnderTheirHostAndPid(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn, table := pgtest.DSN(t), pgtest.Table(t)
	if _, err := postgres.New(context.Background(), pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, dsn, table)
	a := startOwner(t, dsn, table, "alpha-3h=3h,alpha-1h=1h", envTopLease+"=600ms")
	b := startOwner(t, dsn, table, "beta-2h=2h", envTopLease+"=600ms")
	awaitCheckpoints(t, conn, pool, table, 3, a.id, b.id) // the evidence of their sessions' start
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	for _, o := range []*owner{a, b} {
		if want := "-" + strconv.Itoa(o.cmd.Process.Pid) + "-"; !strings.HasPrefix(o.id, host) || !strings.Contains(o.id, want) {
			t.Errorf("owner %q does not name its host %q and pid %d", o.id, host, o.cmd.Process.Pid)
		}
	}
	code, out, errs := topProcess(t, "top", "--json", "--count", "1", "--dsn", dsn, "--table", table)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	l := topJSON(t, out)[0]
	var got []string
	for _, r := range l.Rows {
		got = append(got, r.Session+" "+r.Owner+" "+r.StopRule+" "+strconv.FormatFloat(r.BudgetSeconds, 'f', 0, 64))
		if r.Lease == nil || r.Lease.Expired || r.Freshest != "stdout" || r.WindowStartedAt.IsZero() || r.FactsAt.IsZero() {
			t.Errorf("row %s: lease %+v, freshest %q, started %v, facts at %v", r.Session, r.Lease, r.Freshest, r.WindowStartedAt, r.FactsAt)
		}
	}
	want := []string{"alpha-1h " + a.id + " wall_clock 3600", "beta-2h " + b.id + " wall_clock 7200", "alpha-3h " + a.id + " wall_clock 10800"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows\n%s\nwant (by earliest stop)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The table, filtered by owner: b's window only.
	code, out, errs = topProcess(t, "top", "--count", "1", "--owner", b.id, "--dsn", dsn, "--table", table)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(out, " 1 open windows ") || !strings.Contains(out, "beta-2h") || strings.Contains(out, "alpha") {
		t.Errorf("top --owner %s printed\n%s", b.id, out)
	}
	t.Logf("top --dsn:\n%s", out)
}

// An owner's heartbeat that keeps checkpoints notifies the live channel
// with the owner's id, in its transaction: an admin page can LISTEN
// instead of polling. The checkpoint it kept is in the list.
func TestAHeartbeatThatKeepsCheckpointsNotifiesTheLiveChannel(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn, table := pgtest.DSN(t), pgtest.Table(t)
	if _, err := postgres.New(context.Background(), pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn := listen(t, dsn, table)
	o := startOwner(t, dsn, table, "gamma=1h", envTopLease+"=600ms") // a heartbeat every 200 ms
	awaitCheckpoints(t, conn, pool, table, 1, o.id)
	l, err := postgres.ReadLive(ctx, pool, table, live.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 1 || l.Rows[0].Freshest != "stdout" || l.Rows[0].FactsAt.Before(l.Rows[0].WindowStartedAt) {
		t.Fatalf("after the notification, the list is %+v", l.Rows)
	}
}

// An owner's checkpoint carries its window's calls in flight and its
// earliest stop: top shows the call that runs, and the idle rule's stop,
// which the call defers past its cap, before the wall clock's.
func TestTopShowsAnOwnersCallsInFlightAndItsEarliestStop(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn, table := pgtest.DSN(t), pgtest.Table(t)
	if _, err := postgres.New(context.Background(), pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, dsn, table)
	o := startOwner(t, dsn, table, "delta=1h/5m,epsilon=1h/5m", envTopLease+"=600ms", envTopCall+"=delta=Bash")
	awaitCheckpoints(t, conn, pool, table, 2, o.id)
	code, out, errs := topProcess(t, "top", "--json", "--count", "1", "--dsn", dsn, "--table", table)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	rows := topJSON(t, out)[0].Rows
	if len(rows) != 2 || rows[0].Session != "epsilon" || rows[1].Session != "delta" {
		t.Fatalf("want epsilon (idle in 5m) before delta (its call defers idle past 30m), got %+v", rows)
	}
	eps, del := rows[0], rows[1]
	if eps.CallsInFlight != 0 || eps.StopRule != "idle" || eps.StopAt.After(eps.WindowStartedAt.Add(time.Hour)) {
		t.Errorf("epsilon: %d calls, stop %v by %q", eps.CallsInFlight, eps.StopAt, eps.StopRule)
	}
	if del.CallsInFlight != 1 || del.OldestCall != "Bash" || del.StopRule != "idle" ||
		!del.StopAt.After(del.WindowStartedAt.Add(30*time.Minute)) || !del.StopAt.Before(del.WindowStartedAt.Add(time.Hour)) {
		t.Errorf("delta: %d calls (oldest %q), stop %v by %q (window started %v)", del.CallsInFlight, del.OldestCall, del.StopAt, del.StopRule, del.WindowStartedAt)
	}
	_, text, _ := topProcess(t, "top", "--count", "1", "--dsn", dsn, "--table", table)
	if !strings.Contains(text, "1 (Bash)") {
		t.Errorf("the table does not show delta's call:\n%s", text)
	}
	t.Logf("top --dsn:\n%s", text)
}

// An owner that also records checkpoint events (WithCheckpoints, as run
// does) keeps its windows' checkpoints in the windows table all the same:
// the list, and an adopter, read them there. (The two passes shared one
// mark: the events' pass, more frequent, left the heartbeat nothing.)
func TestAnOwnerThatRecordsCheckpointEventsStillKeepsThemInTheWindowsTable(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn, table := pgtest.DSN(t), pgtest.Table(t)
	if _, err := postgres.New(context.Background(), pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, dsn, table)
	o := startOwner(t, dsn, table, "eta=1h/5m", envTopLease+"=3s", envTopEvents+"=50ms") // a heartbeat every second
	awaitCheckpoints(t, conn, pool, table, 1, o.id)
	l, err := postgres.ReadLive(context.Background(), pool, table, live.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 1 || l.Rows[0].StopRule != "idle" || l.Rows[0].Freshest != "stdout" {
		t.Errorf("rows %+v", l.Rows)
	}
}

// An owner process killed with its windows open: top keeps listing them,
// marked "(lease expired)" once its lease runs out on the database's
// clock (nobody watches them until a fleet member adopts them), and their
// facts stop ageing with the heartbeats that no longer come.
func TestTopMarksTheWindowsOfAKilledOwnerAsLeaseExpired(t *testing.T) {
	pool := pgtest.Pool(t)
	dsn, table := pgtest.DSN(t), pgtest.Table(t)
	if _, err := postgres.New(context.Background(), pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, dsn, table)
	o := startOwner(t, dsn, table, "zeta=1h", envTopLease+"=600ms")
	awaitCheckpoints(t, conn, pool, table, 1, o.id)
	if err := o.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var r live.Row
	for deadline := time.Now().Add(testwait.Bound); r.Lease == nil || !r.Lease.Expired; {
		if time.Now().After(deadline) {
			t.Fatalf("the killed owner's lease did not expire within %v: %+v", testwait.Bound, r.Lease)
		}
		time.Sleep(100 * time.Millisecond) // the lease runs out on the database's clock, 600 ms after the last heartbeat
		code, out, errs := topProcess(t, "top", "--json", "--count", "1", "--dsn", dsn, "--table", table)
		if code != ExitOK || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		if rows := topJSON(t, out)[0].Rows; len(rows) == 1 {
			r = rows[0]
		}
	}
	if r.Session != "zeta" || r.Owner != o.id || r.FactsAt.After(r.Lease.LastSeen) {
		t.Errorf("row %+v: want zeta, owned by %s, its facts no newer than the last heartbeat", r, o.id)
	}
	_, text, _ := topProcess(t, "top", "--count", "1", "--dsn", dsn, "--table", table)
	if !strings.Contains(text, o.id+" (lease expired)") || !strings.Contains(text, "1 whose owner's lease has expired") {
		t.Errorf("the table does not mark the lease expired:\n%s", text)
	}
}

// "sessionwatchdog run" writes a file log while its command runs; top, a
// process of its own, lists the window from it (its owner naming run's
// process, its freshest evidence on stdout), and no longer once the
// command has ended.
func TestTopListsTheWindowOfARunningRunFromItsFileLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.jsonl")
	fifo := filepath.Join(dir, "go")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*testwait.Bound)
	defer cancel()
	// The command says hello, then waits for a line on the fifo.
	wrapper := exec.CommandContext(ctx, os.Args[0], "run", "--log", log, "--session", "build-7", "--checkpoints", "50ms", "--",
		"sh", "-c", "echo hello; read x < "+fifo)
	wrapper.Env = append(os.Environ(), envTopRole+"=cmd", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	out, err := wrapper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := wrapper.Start(); err != nil {
		t.Fatal(err)
	}
	hello := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		hello <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	if got := testwait.For(t, hello, "the command's hello"); got != "hello\n" {
		t.Fatalf("the command printed %q", got)
	}
	// Its hello is evidence on stdout, dated in a checkpoint within 50 ms:
	// top lists it once a checkpoint holds it.
	var row live.Row
	deadline := time.Now().Add(testwait.Bound)
	for row.Freshest == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of stdout's evidence within %v", testwait.Bound)
		}
		code, out, errs := topProcess(t, "top", "--json", "--count", "1", "--log", log)
		if code != ExitOK || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		if l := topJSON(t, out)[0]; len(l.Rows) == 1 {
			row = l.Rows[0]
		}
	}
	if want := "-" + strconv.Itoa(wrapper.Process.Pid) + "-"; row.Session != "build-7" || !strings.Contains(row.Owner, want) ||
		row.Freshest != "stdout" || row.StopRule != "wall_clock" || row.BudgetSeconds <= 0 {
		t.Errorf("row %+v: want session build-7 owned by run's process (%s), fresh on stdout", row, want)
	}
	code, text, errs := topProcess(t, "top", "--count", "1", log)
	if code != ExitOK || errs != "" || !strings.Contains(text, "build-7") || !strings.Contains(text, "stdout ") {
		t.Errorf("top's table: exit %d, stderr %q\n%s", code, errs, text)
	}
	t.Logf("top --log:\n%s", text)

	if err := os.WriteFile(fifo, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := wrapper.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	code, text, errs = topProcess(t, "top", "--count", "1", log)
	if code != ExitOK || errs != "" || !strings.Contains(text, " 0 open windows ") {
		t.Errorf("after the command ended: exit %d, stderr %q\n%s", code, errs, text)
	}
}

// top refreshes every interval, --count times: a header line, a table and
// a blank line each time, or one JSON document per line with --json.
func TestTopPrintsARefreshedTableEveryInterval(t *testing.T) {
	log := filepath.Join(t.TempDir(), "events.jsonl")
	writeLog(t, log, openWindow("s1", time.Now().Add(-time.Minute), ""))
	code, out, errs := run(t, "", "top", "--count", "3", "--interval", "10ms", log)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if n := strings.Count(out, " 1 open windows "); n != 3 || strings.Count(out, "\n\n") != 3 {
		t.Errorf("want 3 refreshes, got\n%s", out)
	}
	code, out, errs = run(t, "", "top", "--json", "--count", "2", "--interval", "10ms", log)
	if code != ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	ls := topJSON(t, out)
	if len(ls) != 2 || len(ls[0].Rows) != 1 || ls[1].At.Before(ls[0].At) {
		t.Errorf("want 2 refreshes of one row each, got %s", out)
	}
}

// A session id, an owner and a channel from the log reach the terminal
// escaped, as inspect's do; long ones are cut to MaxCell unless --wide,
// and --json keeps them whole.
func TestTopEscapesWhatItPrintsFromTheLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "events.jsonl")
	hostile := "s\x1b]0;owned\x07\x1b[2J-" + strings.Repeat("x", 40)
	writeLog(t, log, openWindow(hostile, time.Now().Add(-time.Minute), "own\x1b[31mer"))
	for _, args := range [][]string{{"top", "--count", "1", log}, {"top", "--wide", "--count", "1", log}, {"top", "--json", "--count", "1", log}} {
		code, out, errs := run(t, "", args...)
		if code != ExitOK || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		termClean(t, strings.Join(args, " "), out)
		if strings.Contains(out, "\x1b") {
			t.Errorf("%v printed an escape character: %q", args, out)
		}
	}
	_, out, _ := run(t, "", "top", "--count", "1", log)
	if strings.Contains(out, strings.Repeat("x", 40)) || !strings.Contains(out, "…") {
		t.Errorf("a 60-rune session id is not cut: %q", out)
	}
	_, out, _ = run(t, "", "top", "--json", "--count", "1", log)
	if l := topJSON(t, out)[0]; len(l.Rows) != 1 || l.Rows[0].Session != hostile {
		t.Errorf("--json does not keep the session id whole: %+v", l.Rows)
	}
}

// openWindow is the start event of a session that is still open.
func openWindow(id string, at time.Time, owner string) watchdog.Event {
	return watchdog.Event{ID: "e-" + strconv.Itoa(len(id)), AggregateID: id, Kind: watchdog.KindStart, Window: 1, Owner: owner,
		SessionStartedAt: at.UTC(), WindowStartedAt: at.UTC(), OccurredAt: at.UTC(), ConfiguredBudgetSeconds: 3600,
		Policy: &watchdog.Policy{WallClock: time.Hour}, OpensWindow: true}
}

func writeLog(t *testing.T, path string, events ...watchdog.Event) {
	t.Helper()
	var b bytes.Buffer
	for _, e := range events {
		raw, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
