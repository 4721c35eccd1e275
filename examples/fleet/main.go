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

// budget is the session's wall-clock budget.
const budget = 1500 * time.Millisecond

func main() {
	if os.Getenv(envRole) == "worker" {
		os.Exit(worker(context.Background(), os.Getenv(envDSN), os.Getenv(envTable), os.Getenv(envSession), os.Stdout))
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
	w := watchdog.New(watchdog.WithStore(store))
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envRole+"=worker", envDSN+"="+dsn, envTable+"="+table, envSession+"="+id)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the worker: %w", err)
	}
	var workerStop string
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintf(out, "  worker> %s\n", sc.Text())
			if code, ok := strings.CutPrefix(sc.Text(), "stopping: "); ok {
				workerStop = code
			}
		}
	}()
	// A guard against a worker that never hears of the cancel: the example
	// fails instead of hanging.
	guard := time.AfterFunc(budget+20*time.Second, func() { _ = cmd.Process.Kill() })
	defer guard.Stop()

	<-s.Context().Done()
	fmt.Fprintf(out, "supervisor: the watchdog fired: %v\n", context.Cause(s.Context()))
	<-lines
	werr := cmd.Wait()
	fmt.Fprintf(out, "supervisor: worker exited: %v\n", exitStatus(werr))
	if err := w.Close(ctx); err != nil {
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
	if workerStop != "watchdog_wall_clock_exceeded" {
		problems = append(problems, fmt.Sprintf("the worker stopped with %q, want %q", workerStop, "watchdog_wall_clock_exceeded"))
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
	return nil
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
			}
			fmt.Fprintf(out, "the session is over: %v\n", cause)
			fmt.Fprintf(out, "stopping: %s\n", code)
			return 0
		case <-tick.C:
			fmt.Fprintf(out, "work item %d done\n", n)
		}
	}
}
