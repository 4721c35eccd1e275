//go:build linux

package watchdog_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

	w := watchdog.New(watchdog.WithClock(newMock()))
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

// A workspace declared in the Policy is watched from Start, without a
// WatchWorkspace call, and the start record's policy says which directory
// and which ignore rules; a workspace that is not there fails Start with
// nothing recorded, so that no session silently runs without it.
func TestAWorkspaceDeclaredInThePolicyIsWatchedAndRecorded(t *testing.T) {
	dir := t.TempDir()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(newMock()), watchdog.WithStore(store))
	defer w.Close(context.Background())
	paths := make(chan string, 64)
	watchdog.SetWorkspaceHook(w, func(_ *watchdog.Session, p string) { paths <- p })
	p := watchdog.Policy{WallClock: time.Hour, WorkspaceRoot: dir, WorkspaceIgnore: []string{".git", "*.tmp"}}
	s, err := w.Start(context.Background(), "agent", t0, p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main"), 0o644))
	require.Equal(t, filepath.Join(dir, "main.go"), <-paths)
	require.NoError(t, w.Check(context.Background()))
	evs := load(t, store, "agent")
	require.Equal(t, dir, evs[0].Policy.WorkspaceRoot)
	require.Equal(t, []string{".git", "*.tmp"}, evs[0].Policy.WorkspaceIgnore)
	require.NoError(t, s.Stop())

	_, err = w.Start(context.Background(), "missing", t0, watchdog.Policy{WorkspaceRoot: filepath.Join(dir, "gone")})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	require.ErrorContains(t, err, "is not a directory")
	_, err = w.Start(context.Background(), "relative", t0, watchdog.Policy{WorkspaceRoot: "work"})
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	_, err = w.Start(context.Background(), "ignore-only", t0, watchdog.Policy{WorkspaceIgnore: []string{"*.tmp"}})
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	_, err = w.Start(context.Background(), "bad-pattern", t0, watchdog.Policy{WorkspaceRoot: dir, WorkspaceIgnore: []string{"[a-"}})
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	require.NoError(t, w.Check(context.Background()))
	for _, id := range []string{"missing", "relative", "ignore-only", "bad-pattern"} {
		evs, err := store.Load(context.Background(), id)
		require.NoError(t, err)
		require.Empty(t, evs, "%s: nothing recorded", id)
	}
}

// The workspace knobs round-trip through the Policy's JSON.
func TestWorkspaceKnobsRoundTripThroughJSON(t *testing.T) {
	in := `{"session_wall_clock_seconds":60,"workspace_root":"/srv/agent","workspace_ignore":[".git","node_modules"]}`
	var p watchdog.Policy
	require.NoError(t, json.Unmarshal([]byte(in), &p))
	require.Equal(t, "/srv/agent", p.WorkspaceRoot)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
}
