// Command fleet shows a supervisor and a worker, two processes that share
// only a PostgreSQL database (the stores/postgres event store):
//
//   - the supervisor runs a Watchdog on the PostgreSQL store and starts a
//     session with a short wall-clock budget;
//   - it starts the worker, a second process (this program re-executed with
//     WATCHDOG_FLEET_ROLE=worker), which knows nothing but the database and
//     the session id: it follows the session with watchdog.Follow and works
//     until the session's context is cancelled;
//   - the supervisor's watchdog fires the wall-clock cancel and records it in
//     the database; the worker's Follow sees the terminal event through
//     LISTEN/NOTIFY, and the worker exits cleanly, printing the stop reason
//     (watchdog_wall_clock_exceeded);
//   - the supervisor prints the events as the database holds them and checks
//     the story: it exits non-zero if it did not happen.
//
// Then the fleet loses an orchestrator:
//
//   - a second orchestrator process (WATCHDOG_FLEET_ROLE=orchestrator) starts
//     a session with a one-hour budget, and a second worker follows it;
//   - the supervisor, a fleet member made with watchdog.WithAdoption, kills
//     that orchestrator with SIGKILL: its lease (watchdog.DefaultLeaseTTL,
//     6 s, renewed every 2 s, judged on the database's clock) expires;
//   - the supervisor adopts the orphaned window and, as the policy's
//     default says for agents that die with their orchestrator, ends it at
//     once: a stop with reason owner_lost, recording which owner was lost
//     and when it was last seen; the worker exits with that reason, about
//     6 s after the kill instead of an hour later.
//
// It needs a PostgreSQL server: give a DSN with -dsn or WATCHDOG_PG_DSN.
// Without one it says so and exits 0. From the repository root, with a
// throw-away server:
//
//	cd examples/fleet && ../../scripts/with-postgres go run .
//
// It lives in its own module because it imports stores/postgres (pgx): the
// root module stays free of database drivers.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

// The environment of the worker process, and of a run without -dsn.
const (
	envDSN     = "WATCHDOG_PG_DSN"
	envRole    = "WATCHDOG_FLEET_ROLE" // "worker" in the worker process
	envSession = "WATCHDOG_FLEET_SESSION"
	envTable   = "WATCHDOG_FLEET_TABLE"
)

// roles of the processes besides the supervisor
const (
	roleWorker       = "worker"
	roleOrchestrator = "orchestrator"
)

// budget is the session's wall-clock budget.
const budget = 1500 * time.Millisecond

func main() {
	if code, ok := runRole(); ok {
		os.Exit(code)
	}
	dsn := flag.String("dsn", os.Getenv(envDSN), "PostgreSQL `DSN` (default $"+envDSN+")")
	table := flag.String("table", postgres.DefaultTable, "the events `table` (created if missing)")
	flag.Parse()
	if *dsn == "" {
		fmt.Println("fleet: no PostgreSQL DSN given (-dsn or " + envDSN + "), so there is nothing to run; exiting.")
		fmt.Println("fleet: run it with a throw-away server: cd examples/fleet && ../../scripts/with-postgres go run .")
		return
	}
	if err := supervise(context.Background(), *dsn, *table, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// supervise is the supervisor process: it watches a new session on the
// PostgreSQL store, runs the worker next to it, and checks the story.
func supervise(ctx context.Context, dsn, table string, out io.Writer) error {
	out = &lockedWriter{w: out} // the worker's lines are copied concurrently
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.WithTable(table))
	if err != nil {
		return err
	}
	defer store.Close()

	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "fleet-" + hex.EncodeToString(b[:])
	// A fleet member: it owns the windows it opens (a lease it renews) and
	// adopts those of members whose lease expired.
	w := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
	defer w.Close(ctx)
	s, err := w.Start(ctx, id, time.Now(), watchdog.Policy{WallClock: budget})
	if err != nil {
		return err
	}
	if err := w.Check(ctx); err != nil { // the start event is in the database
		return err
	}
	fmt.Fprintf(out, "supervisor: session %s started on table %s, budget %v\n", id, store.Table(), budget)

	// The worker: this program again, told only the DSN and the session.
	cmd, lines, workerStop, err := spawn(roleWorker, dsn, table, id, "  worker> ", out)
	if err != nil {
		return err
	}
	// A guard against a worker that never hears of the cancel: the example
	// fails instead of hanging.
	guard := time.AfterFunc(budget+20*time.Second, func() { _ = cmd.Process.Kill() })
	defer guard.Stop()

	<-s.Context().Done()
	fmt.Fprintf(out, "supervisor: the watchdog fired: %v\n", context.Cause(s.Context()))
	<-lines.done
	werr := cmd.Wait()
	fmt.Fprintf(out, "supervisor: worker exited: %v\n", exitStatus(werr))
	if err := w.Check(ctx); err != nil {
		return err
	}

	events, err := store.Load(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nevents in PostgreSQL (table %s, session %s):\n", store.Table(), id)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  seq\twindow\t+s\tkind\treason")
	for _, e := range events {
		fmt.Fprintf(tw, "  %d\t%d\t%.2f\t%s\t%s\n", e.Seq, e.Window, e.ElapsedSeconds, e.Kind, e.Reason)
	}
	_ = tw.Flush()

	var problems []string
	if werr != nil {
		problems = append(problems, "the worker failed: "+exitStatus(werr))
	}
	if *workerStop != "watchdog_wall_clock_exceeded" {
		problems = append(problems, fmt.Sprintf("the worker stopped with %q, want %q", *workerStop, "watchdog_wall_clock_exceeded"))
	}
	cancels := 0
	for _, e := range events {
		if e.Kind == watchdog.KindCancel && e.Reason == "wall_clock_exceeded" {
			cancels++
		}
	}
	if cancels != 1 {
		problems = append(problems, fmt.Sprintf("%d wall-clock cancel events in the database, want 1", cancels))
	}
	if len(problems) > 0 {
		return errors.New("the story did not happen as expected:\n  - " + strings.Join(problems, "\n  - "))
	}
	fmt.Fprintln(out, "\nOK: the supervisor's cancel reached the worker through PostgreSQL, and the worker exited with the stop reason.")
	return adoption(ctx, w, store, dsn, table, out)
}

// adoption is the second act: an orchestrator process dies, and the
// supervisor, a fleet member, adopts and ends its window.
func adoption(ctx context.Context, w *watchdog.Watchdog, store *postgres.Store, dsn, table string, out io.Writer) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "fleet-" + hex.EncodeToString(b[:])
	fmt.Fprintf(out, "\nsupervisor: an orchestrator process starts session %s (budget 1h) and a worker follows it\n", id)
	orch, orchLines, _, err := spawn(roleOrchestrator, dsn, table, id, "  orchestrator> ", out)
	if err != nil {
		return err
	}
	<-orchLines.started
	wcmd, wlines, workerStop, err := spawn(roleWorker, dsn, table, id, "  worker> ", out)
	if err != nil {
		return err
	}
	<-wlines.started
	killed := time.Now()
	_ = orch.Process.Kill()
	_ = orch.Wait()
	<-orchLines.done
	fmt.Fprintln(out, "supervisor: killed the orchestrator (SIGKILL): its lease expires, and a fleet member adopts its window")
	guard := time.AfterFunc(time.Minute, func() { _ = wcmd.Process.Kill() })
	defer guard.Stop()
	<-wlines.done
	werr := wcmd.Wait()
	fmt.Fprintf(out, "supervisor: worker exited %.1f s after the kill: %v\n", time.Since(killed).Seconds(), exitStatus(werr))
	if err := w.Check(ctx); err != nil {
		return err
	}
	events, err := store.Load(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nevents in PostgreSQL (session %s):\n", id)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  seq\tkind\treason\towner\tadopted_from\towner_last_seen")
	for _, e := range events {
		seen := ""
		if !e.OwnerLastSeen.IsZero() {
			seen = e.OwnerLastSeen.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Kind, e.Reason, e.Owner, e.AdoptedFrom, seen)
	}
	_ = tw.Flush()
	var problems []string
	if werr != nil {
		problems = append(problems, "the worker failed: "+exitStatus(werr))
	}
	if *workerStop != watchdog.StopOwnerLost {
		problems = append(problems, fmt.Sprintf("the worker stopped with %q, want %q", *workerStop, watchdog.StopOwnerLost))
	}
	if n := len(events); n != 3 || events[1].AdoptedFrom != events[0].Owner || events[2].Reason != watchdog.StopOwnerLost {
		problems = append(problems, fmt.Sprintf("want start, resume (adopted from the orchestrator) and stop (owner_lost); got %d events", n))
	}
	if len(problems) > 0 {
		return errors.New("the adoption did not happen as expected:\n  - " + strings.Join(problems, "\n  - "))
	}
	fmt.Fprintln(out, "\nOK: the orchestrator died; a fleet member adopted its window and ended it (owner_lost), and the worker exited.")
	return nil
}

// output follows a child's lines: started is closed at its first line,
// done when its output ends.
type output struct{ started, done chan struct{} }

// spawn runs this program again in role, told only the DSN, the table and
// the session, copying its lines to out with prefix. The string it returns
// receives the stop reason the child prints ("stopping: CODE").
func spawn(role, dsn, table, id, prefix string, out io.Writer) (*exec.Cmd, output, *string, error) {
	o := output{started: make(chan struct{}), done: make(chan struct{})}
	self, err := os.Executable()
	if err != nil {
		return nil, o, nil, err
	}
	//watchdog:unbounded the demo ends its processes itself: killing one with SIGKILL is its point
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envRole+"="+role, envDSN+"="+dsn, envTable+"="+table, envSession+"="+id)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, o, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, o, nil, fmt.Errorf("start the %s: %w", role, err)
	}
	stop := new(string)
	go func() {
		defer close(o.done)
		first := true
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintf(out, "%s%s\n", prefix, sc.Text())
			if code, ok := strings.CutPrefix(sc.Text(), "stopping: "); ok {
				*stop = code
			}
			if first {
				first = false
				close(o.started)
			}
		}
		if first {
			close(o.started)
		}
	}()
	return cmd, o, stop, nil
}

// runRole runs this process's role if it is not the supervisor, and
// returns its exit code.
func runRole() (int, bool) {
	ctx := context.Background()
	dsn, table, id := os.Getenv(envDSN), os.Getenv(envTable), os.Getenv(envSession)
	switch os.Getenv(envRole) {
	case roleWorker:
		return worker(ctx, dsn, table, id, os.Stdout), true
	case roleOrchestrator:
		return orchestrate(ctx, dsn, table, id, os.Stdout), true
	}
	return 0, false
}

// orchestrate is an orchestrator process that starts a session with a long
// budget and runs until it is killed.
func orchestrate(ctx context.Context, dsn, table, id string, out io.Writer) int {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 2
	}
	store, err := postgres.New(ctx, pool, postgres.WithTable(table))
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 2
	}
	w := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
	if _, err := w.Start(ctx, id, time.Now(), watchdog.Policy{WallClock: time.Hour}); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 2
	}
	fmt.Fprintf(out, "watching session %s\n", id)
	select {} // until killed
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// worker is the worker process: it follows the session through the database
// and works until the session is over, then prints the stop reason. It
// returns its exit code.
func worker(ctx context.Context, dsn, table, id string, out io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(out, "error:", err)
		return 2
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	store, err := postgres.New(ctx, pool, postgres.WithTable(table))
	if err != nil {
		return fail(err)
	}
	defer store.Close()
	fctx, stop, err := watchdog.Follow(ctx, store, id)
	if err != nil {
		return fail(err)
	}
	defer stop()
	fmt.Fprintf(out, "following session %s\n", id)
	tick := time.NewTicker(400 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-fctx.Done():
			cause := context.Cause(fctx)
			code := watchdog.StopCompleted
			var v *watchdog.VerdictError
			if errors.As(cause, &v) {
				code = v.StopReasonCode()
			} else if _, c, ok := strings.Cut(cause.Error(), "stop_reason_code "); ok {
				code = strings.TrimSuffix(c, ")")
			}
			fmt.Fprintf(out, "the session is over: %v\n", cause)
			fmt.Fprintf(out, "stopping: %s\n", code)
			return 0
		case <-tick.C:
			fmt.Fprintf(out, "work item %d done\n", n)
		}
	}
}
