//go:build linux

package watchdog_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// An agent whose only work is git operations is not idle: with the default
// ignore rules, the top level of .git is watched, so a commit counts as
// workspace evidence, while writes under .git/objects (a fetch's or a gc's
// storm) produce no event at all. inotify delivers events in order, so the
// marker arriving first proves the object writes produced none.
func TestGitCommitsAreWorkspaceEvidenceWithoutAnObjectStorm(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("SKIPPING: git is not installed")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(git, args...) //watchdog:unbounded a test's local git command
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	run("init", "-q")
	run("config", "user.email", "agent@example.com")
	run("config", "user.name", "agent")
	run("config", "commit.gpgsign", "false")
	gitDir := filepath.Join(dir, ".git")

	w := watchdog.New(watchdog.WithClock(clock.NewMock()))
	defer w.Close(context.Background())
	paths := make(chan string, 1024)
	watchdog.SetWorkspaceHook(w, func(_ *watchdog.Session, p string) { paths <- p })
	s, err := w.Start(context.Background(), "agent", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.WatchWorkspace(dir))

	require.NoError(t, os.MkdirAll(filepath.Join(gitDir, "objects", "ab"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gitDir, "objects", "ab", "cdef"), []byte("blob"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(gitDir, "marker"), 0o755))
	require.Equal(t, filepath.Join(gitDir, "marker"), <-paths, "writes under .git/objects produce no event")

	run("commit", "-q", "--allow-empty", "-m", "work")
	p := <-paths
	require.Equal(t, gitDir, filepath.Dir(p), "a commit writes the top level of .git: %s", p)
}
