//go:build linux

package watchdog_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// A file written in a watched workspace at mock +8 s is evidence dated
// +8 s, not when the monitor's goroutine got round to it after the test
// moved the clock on: Advance (and Settle, and Check) first wait for the
// workspace monitor to deliver every change made before them. The idle
// verdict at +10 s, deferred by the workspace, shows the date; so does the
// next, one TTL later.
func TestAFileWrittenAtMock8sIsWorkspaceEvidenceDated8s(t *testing.T) {
	for _, settle := range []string{"Advance", "Settle"} {
		t.Run(settle, func(t *testing.T) {
			mock := newMock()
			store := watchdog.NewMemoryStore()
			w := newWatchdog(t, mock, store)
			dir := t.TempDir()
			_, err := w.Start(context.Background(), "s", t0,
				watchdog.Policy{IdleWindow: 10 * time.Second, WorkspaceRoot: dir, EvidenceTTL: 5 * time.Second})
			require.NoError(t, err)
			advance(t, mock, 8*time.Second, w)
			for i, name := range []string{"a.txt", "b.txt", "c.txt"} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte{byte(i)}, 0o600))
			}
			if settle == "Settle" {
				require.NoError(t, watchdogtest.Settle(context.Background(), w))
				mock.Add(4 * time.Second) // a plain move of the mock: the evidence is in already
				require.NoError(t, w.Check(context.Background()))
			} else {
				advance(t, mock, 4*time.Second, w)
			}
			verdicts := ofKind(load(t, store, "s"), watchdog.KindVerdict)
			require.NotEmpty(t, verdicts, "the idle rule deferred at +10 s")
			ws := entry(t, verdicts[0], "workspace")
			require.NotNil(t, ws.LastAt)
			assert.Equal(t, t0.Add(8*time.Second), ws.LastAt.UTC(), "dated when the files were written")
			assert.Positive(t, ws.Counter)
		})
	}
}

// A workspace inside a testing/synctest bubble is refused at once, by
// Start (Policy.WorkspaceRoot) and by WatchWorkspace, with an error that
// names synctest and what to do: the watcher's goroutine waits on I/O,
// which the bubble does not count as blocked, so the bubble's time would
// never move and the test would hang until go test's timeout. The bubble
// runs under a bounded wait, so that a hang fails this test instead.
func TestAWorkspaceInASynctestBubbleIsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			w := watchdog.New()
			_, err := w.Start(ctx, "declared", time.Now(), watchdog.Policy{WallClock: time.Minute, WorkspaceRoot: dir})
			if assert.ErrorIs(t, err, watchdog.ErrInvalidArgument) {
				assert.Contains(t, err.Error(), "testing/synctest")
				assert.Contains(t, err.Error(), "*clock.Mock")
			}
			s, err := w.Start(ctx, "watched", time.Now(), watchdog.Policy{WallClock: time.Minute})
			require.NoError(t, err)
			err = s.WatchWorkspace(dir)
			if assert.ErrorIs(t, err, watchdog.ErrInvalidArgument) {
				assert.Contains(t, err.Error(), "testing/synctest")
			}
			time.Sleep(2 * time.Minute) // the bubble's time moves: the wall clock ends the session
			assert.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
			assert.NoError(t, w.Close(ctx))
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the bubble hung: its time did not move with a workspace watched")
	}
}

// writerFunc is an io.Writer made of a func.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Evidence from a pipe the test wired (exec copies a child's output into
// s.Writer on a goroutine of its own) is the test's to wait for: a writer
// that reports each write, received before the clock moves on, dates the
// child's line at mock +8 s, when the child printed it.
func TestEvidenceFromAPipeYouWiredIsDatedWhenYouWaitForIt(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, watchdog.Policy{IdleWindow: 10 * time.Second, EvidenceTTL: 5 * time.Second})
	require.NoError(t, err)
	out := s.Writer(watchdog.ChannelSubagent, io.Discard)
	cmd := exec.Command("sh", "-c", "read line; echo \"$line\"; cat >/dev/null") //watchdog:unbounded ends when the test closes its stdin
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)

	got := make(chan struct{}, 16)
	cmd.Stdout = writerFunc(func(p []byte) (int, error) {
		n, err := out.Write(p) // out := s.Writer(watchdog.ChannelSubagent, io.Discard)
		got <- struct{}{}
		return n, err
	})
	require.NoError(t, cmd.Start())
	advance(t, mock, 8*time.Second, w)
	_, err = io.WriteString(stdin, "working\n") // the child prints a line
	require.NoError(t, err)
	testwait.For(t, got, "the child's line") // the line is evidence, dated now
	require.NoError(t, watchdogtest.Advance(ctx, mock, 4*time.Second, w))

	verdicts := ofKind(load(t, store, "s"), watchdog.KindVerdict)
	require.NotEmpty(t, verdicts, "the idle rule deferred at +10 s")
	sub := entry(t, verdicts[0], "subagent")
	require.NotNil(t, sub.LastAt)
	assert.Equal(t, t0.Add(8*time.Second), sub.LastAt.UTC())
	require.NoError(t, stdin.Close())
	require.NoError(t, testwait.Call(t, cmd.Wait, "the child to exit"))
}
