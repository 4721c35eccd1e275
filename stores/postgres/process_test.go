package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// The two-process tests re-execute this test binary in a role (TestMain
// dispatches on envRole): a supervisor runs a Watchdog on the PostgreSQL
// store, a worker follows a session through it. They talk to the parent
// only through their output lines and exit status, and to each other only
// through the database.
const (
	envRole    = "WATCHDOG_PG_TEST_ROLE"
	envSession = "WATCHDOG_PG_TEST_SESSION"
	envTable   = "WATCHDOG_PG_TEST_TABLE"
	envMode    = "WATCHDOG_PG_TEST_MODE"
	envBudget  = "WATCHDOG_PG_TEST_BUDGET"
	envWait    = "WATCHDOG_PG_TEST_WAIT"  // supervisor: print WAITING, read a line from stdin, then start
	envLease   = "WATCHDOG_PG_TEST_LEASE" // supervisor: the lease's time to live
	envRetry   = "WATCHDOG_PG_TEST_RETRY" // supervisor: retry a resume refused while another owner's lease lives
)

func runChild(role string) int {
	ctx := context.Background()
	dsn := os.Getenv(envDSN)
	if u := os.Getenv(envUser); u != "" {
		dsn += " user=" + u
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	defer pool.Close()
	opts := []Option{WithTable(os.Getenv(envTable))}
	if os.Getenv(envNoMigrate) != "" {
		opts = append(opts, WithoutMigration())
	}
	store, err := New(ctx, pool, opts...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	defer store.Close()
	id := os.Getenv(envSession)
	switch role {
	case "member":
		return runMember(ctx, store)
	case "follower":
		return runFollower(ctx, store)
	case "fleetowner":
		return runFleetOwner(ctx, store)
	case "adopter":
		return runAdopter(ctx, store)
	case "worker":
		// A component that did not start the watch: it exits cleanly when
		// a supervisor in another process records the session's verdict.
		fctx, stop, err := watchdog.Follow(ctx, store, id)
		if err != nil {
			fmt.Println("ERROR", err)
			return 2
		}
		defer stop()
		fmt.Println("READY")
		<-fctx.Done()
		code := watchdog.StopCompleted
		var v *watchdog.VerdictError
		if errors.As(context.Cause(fctx), &v) {
			code = v.StopReasonCode()
		}
		fmt.Println("STOP", code)
		return 0
	case "supervisor":
		budget, err := time.ParseDuration(os.Getenv(envBudget))
		if err != nil {
			fmt.Println("ERROR", err)
			return 2
		}
		if os.Getenv(envWait) != "" {
			fmt.Println("WAITING")
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				fmt.Println("ERROR", err)
				return 2
			}
		}
		core, logs := observer.New(zap.InfoLevel)
		lease, _ := time.ParseDuration(os.Getenv(envLease))
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithLogger(zap.New(core)), watchdog.WithLease(lease))
		policy := watchdog.Policy{WallClock: budget}
		var s *watchdog.Session
		for {
			if os.Getenv(envMode) == "resume" {
				s, err = w.Resume(ctx, id, policy)
			} else {
				s, err = w.Start(ctx, id, time.Now(), policy)
			}
			if !errors.Is(err, watchdog.ErrAlreadyWatched) || os.Getenv(envRetry) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond) // the other owner's lease is not expired yet
		}
		if errors.Is(err, watchdog.ErrAlreadyWatched) {
			fmt.Println("REFUSED", err)
			_ = w.Close(ctx)
			return 0
		}
		if err == nil {
			err = w.Check(ctx) // the start/resume event is recorded
		}
		if err != nil {
			fmt.Println("ERROR", err)
			return 2
		}
		fmt.Println("STARTED", s.Window(), s.StartedAt().Format(time.RFC3339Nano))
		<-s.Context().Done()
		if err := w.Close(ctx); err != nil { // records the verdict
			fmt.Println("ERROR", err)
			return 3
		}
		code := "none"
		var v *watchdog.VerdictError
		if errors.As(context.Cause(s.Context()), &v) {
			code = v.StopReasonCode()
		}
		refused := 0
		for _, e := range logs.All() {
			if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, watchdog.ErrAlreadyDecided.Error()) {
				refused++
			}
		}
		fmt.Println("ENDED", code, "refused="+strconv.Itoa(refused))
		return 0
	}
	fmt.Println("ERROR unknown role", role)
	return 2
}

type child struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, name, role, table, session string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //watchdog:unbounded the test kills and waits for its children
	cmd.Env = append(os.Environ(), envRole+"="+role, envTable+"="+table, envSession+"="+session)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, name: name, cmd: cmd, stdin: in, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// expect returns the child's next output line, which must start with prefix.
func (c *child) expect(prefix string) string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("%s exited before printing %q", c.name, prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			c.t.Fatalf("%s printed %q, want %q...", c.name, line, prefix)
		}
		return line
	case <-time.After(time.Minute): // a guard against a hung child, not a wait for it
		c.t.Fatalf("%s printed nothing for a minute (want %q)", c.name, prefix)
	}
	return ""
}

// wait waits for the child to exit and requires exit status 0.
func (c *child) wait() {
	c.t.Helper()
	err := testwait.Call(c.t, func() error {
		for range c.lines {
		}
		return c.cmd.Wait()
	}, c.name+" to exit")
	require.NoError(c.t, err, "%s's exit status", c.name)
}

func (c *child) kill() {
	c.t.Helper()
	require.NoError(c.t, c.cmd.Process.Signal(syscall.SIGKILL))
	err := c.cmd.Wait()
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(c.t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s did not die of SIGKILL: %v", c.name, err)
}

// loadKinds returns the kinds of the session's lifecycle events (start,
// resume, stop, cancel), in order, and all its events. Other kinds (a
// decision record, for example) are left out of the kinds.
func loadKinds(t *testing.T, s *Store, id string) ([]string, []watchdog.Event) {
	t.Helper()
	evs, err := s.Load(context.Background(), id)
	require.NoError(t, err)
	var kinds []string
	for _, e := range evs {
		switch e.Kind {
		case watchdog.KindStart, watchdog.KindResume, watchdog.KindStop, watchdog.KindCancel:
			kinds = append(kinds, e.Kind)
		}
	}
	return kinds, evs
}

func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	pool := testPool(t)
	table := uniqueTable(t)
	store := newStore(t, pool, WithTable(table))

	// A supervisor process fires a wall-clock cancel; a worker process
	// following the session through PostgreSQL exits with its code.
	t.Run("supervisor cancels, worker in another process exits", func(t *testing.T) {
		worker := startChild(t, "worker", "worker", table, "a")
		worker.expect("READY")
		sup := startChild(t, "supervisor", "supervisor", table, "a", envBudget+"=300ms")
		sup.expect("STARTED 1 ")
		assert.Equal(t, "STOP watchdog_wall_clock_exceeded", worker.expect("STOP"))
		worker.wait()
		assert.Equal(t, "ENDED watchdog_wall_clock_exceeded refused=0", sup.expect("ENDED"))
		sup.wait()
		kinds, _ := loadKinds(t, store, "a")
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindCancel}, kinds)
	})

	// The supervisor is killed with SIGKILL mid-run; a new one resumes the
	// session, once the dead one's lease (500 ms) has expired, with its
	// original start and fires once.
	t.Run("supervisor killed mid-run, a new one resumes", func(t *testing.T) {
		worker := startChild(t, "worker", "worker", table, "b")
		worker.expect("READY")
		sup1 := startChild(t, "supervisor 1", "supervisor", table, "b", envBudget+"=1500ms", envLease+"=500ms")
		started := sup1.expect("STARTED 1 ")
		sup1.kill()
		kinds, _ := loadKinds(t, store, "b")
		require.Equal(t, []string{watchdog.KindStart}, kinds, "the killed supervisor recorded its start, no verdict")

		sup2 := startChild(t, "supervisor 2", "supervisor", table, "b", envBudget+"=1500ms", envMode+"=resume", envRetry+"=1")
		assert.Equal(t, started, sup2.expect("STARTED 1 "), "same window, same session_started_at")
		assert.Equal(t, "STOP watchdog_wall_clock_exceeded", worker.expect("STOP"))
		worker.wait()
		assert.Equal(t, "ENDED watchdog_wall_clock_exceeded refused=0", sup2.expect("ENDED"))
		sup2.wait()
		kinds, evs := loadKinds(t, store, "b")
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindCancel}, kinds)
		for _, e := range evs {
			assert.Equal(t, evs[0].SessionStartedAt, e.SessionStartedAt)
			assert.Equal(t, 1, e.Window)
		}
	})

	// Two live supervisors in two processes resume the same session at
	// once (on the parent's signal): the database hands the window to one;
	// the other is refused while the first one's lease lives. One cancel is
	// recorded.
	t.Run("two supervisors race to resume, one watches", func(t *testing.T) {
		sups := []*child{
			startChild(t, "supervisor 1", "supervisor", table, "c", envBudget+"=1s", envMode+"=resume", envWait+"=1"),
			startChild(t, "supervisor 2", "supervisor", table, "c", envBudget+"=1s", envMode+"=resume", envWait+"=1"),
		}
		for _, s := range sups {
			s.expect("WAITING")
		}
		now := time.Now().UTC()
		start := watchdog.Event{ID: "c-start", AggregateID: "c", Kind: watchdog.KindStart,
			Window: 1, SessionStartedAt: now, WindowStartedAt: now, OccurredAt: now, ConfiguredBudgetSeconds: 1}
		require.NoError(t, store.Append(context.Background(), start))
		for _, s := range sups {
			_, err := io.WriteString(s.stdin, "go\n")
			require.NoError(t, err)
		}
		var outcomes []string
		for _, s := range sups {
			line := s.expect("")
			if strings.HasPrefix(line, "STARTED 1 ") {
				line = s.expect("ENDED")
			}
			outcomes = append(outcomes, strings.Fields(line)[0]+" "+strings.Fields(line)[1])
			s.wait()
		}
		assert.ElementsMatch(t, []string{"ENDED watchdog_wall_clock_exceeded", "REFUSED watchdog:"}, outcomes)
		kinds, _ := loadKinds(t, store, "c")
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindCancel}, kinds)
	})
}
