//go:build linux

package watchdog_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// killedCommand starts script under Command on s's context with grace,
// its stdout a pipe every process of the tree inherits, and returns the
// pipe's read end after the script's first line ("started").
func killedCommand(t *testing.T, s *watchdog.Session, grace time.Duration, script string) (*bufio.Reader, int) {
	t.Helper()
	r, wp, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	cmd := watchdog.Command(s.Context(), grace, "sh", "-c", script)
	cmd.Stdout = wp
	require.NoError(t, cmd.Start())
	require.NoError(t, wp.Close())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // reaps the leader; the test waits for the tree through the pipe
	t.Cleanup(func() { testwait.For(t, waited, "the command's Wait") })
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)
	return br, cmd.Process.Pid
}

// Close after a stopped session whose command is in its kill's grace
// waits for the command's tree to be gone, not for the grace (a minute
// here), and records the kill: the leader exits on SIGTERM at once, a
// child that ignores it a second after the start, and Close returns
// within milliseconds of that (the latency is logged).
func TestCloseWaitsForACommandsKillUntilItsTreeIsGoneAndRecordsIt(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	out, pgid := killedCommand(t, s, time.Minute,
		`(trap "" TERM; exec sleep 1) & trap "echo term; exit 0" TERM; echo started; wait`)
	require.NoError(t, s.Stop())
	line, err := out.ReadString('\n') // the kill has begun: SIGTERM reached the leader
	require.NoError(t, err)
	require.Equal(t, "term\n", line)
	treeEnd := make(chan time.Time, 1)
	go func() { _, _ = io.ReadAll(out); treeEnd <- time.Now() }() // EOF: the last process of the tree is gone

	begin := time.Now()
	require.NoError(t, w.Close(context.Background()))
	returned := time.Now()
	end := testwait.For(t, treeEnd, "the tree to end")
	t.Logf("Close took %v; it returned %v after the tree's end (grace: 1m)", returned.Sub(begin), returned.Sub(end))
	assert.Less(t, returned.Sub(begin), 10*time.Second, "Close waited for the grace, not the tree")
	assert.Less(t, returned.Sub(end), time.Second, "Close returned long after the tree's end")
	requireGroupGone(t, pgid)

	var killed []watchdog.Event
	for _, e := range load(t, store, "s") {
		if e.Kind == watchdog.KindProcessKilled {
			killed = append(killed, e)
		}
	}
	require.Len(t, killed, 1, "Close recorded the kill")
	assert.Equal(t, "sh", killed[0].Handler)
	assert.Equal(t, "sigterm", killed[0].Reason)
	assert.Zero(t, killed[0].ProcessesAlive)
	assert.Equal(t, 60.0, killed[0].LimitSeconds)
}

// Close's wait for a kill in its grace ends with Close's ctx: Close
// returns by it, and its error wraps ErrNotRecorded and names the kill it
// abandons; the grace's end still SIGKILLs the tree.
func TestCloseNamesAKillItAbandonsAtItsContextsEnd(t *testing.T) {
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	out, pgid := killedCommand(t, s, 2*time.Second,
		`(trap "" TERM; exec sleep 1000) & trap "echo term" TERM; echo started; while :; do wait; done`)
	require.NoError(t, s.Stop())
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "term\n", line)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = w.Close(ctx)
	require.ErrorIs(t, err, watchdog.ErrNotRecorded)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `the kill of "sh" (process group `+strconv.Itoa(pgid)+`)`)
	// The grace's end kills what is left: the pipe's EOF.
	require.NoError(t, testwait.Call(t, func() error { _, err := io.ReadAll(out); return err }, "the grace's SIGKILL to end the tree"))
	requireGroupGone(t, pgid)
}
