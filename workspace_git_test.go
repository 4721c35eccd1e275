//go:build linux

package watchdog_test

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// git runs git in dir with no user or system configuration, and returns
// its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return gitInput(t, dir, "", args...)
}

// gitInput is git with input on its standard input.
func gitInput(t *testing.T, dir, input string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("SKIPPING: git is not installed")
	}
	cmd := exec.Command(bin, args...) //watchdog:unbounded a test's local git command
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(input)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// watchGitWorkspace starts a session that watches dir with the default
// ignore rules, and returns the paths of the workspace changes it counts,
// in the order the monitor sees them.
func watchGitWorkspace(t *testing.T, dir string) <-chan string {
	t.Helper()
	git(t, dir, "--version") // skips the test without git
	w := watchdog.New(watchdog.WithClock(newMock()))
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	paths, done := make(chan string, 1024), make(chan struct{})
	t.Cleanup(func() { close(done) }) // first: the hook never blocks Close
	watchdog.SetWorkspaceHook(w, func(_ *watchdog.Session, p string) {
		select {
		case paths <- p:
		case <-done:
		}
	})
	s, err := w.Start(context.Background(), "agent", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.WatchWorkspace(dir))
	return paths
}

// waitChange reads paths until one is want (or, with a trailing separator,
// under it), and fails the test, saying what it waited for, if none comes
// within 10 s: a change is reported as soon as the monitor reads it.
func waitChange(t *testing.T, paths <-chan string, want, what string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var seen []string
	for {
		select {
		case p := <-paths:
			if p == want || strings.HasSuffix(want, "/") && strings.HasPrefix(p, want) {
				return p
			}
			seen = append(seen, p)
		case <-deadline:
			t.Fatalf("no workspace change %s (%s) within 10 s; saw %q", want, what, seen)
		}
	}
}

// blobWithPrefix returns content whose git blob id starts with prefix.
func blobWithPrefix(prefix string) (content, id string) {
	for i := 0; ; i++ {
		content = fmt.Sprintf("work %d\n", i)
		id = fmt.Sprintf("%x", sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(content), content))))
		if strings.HasPrefix(id, prefix) {
			return content, id
		}
	}
}

// An agent whose only work is git operations is not idle, and a fetch's
// thousands of refs are not an event each: with the default ignore rules,
// .git's top level is watched, so a commit counts as workspace evidence,
// while refs/ is not watched. inotify delivers events in order, so the
// marker arriving first proves the ref writes produced none.
func TestGitCommitsAreWorkspaceEvidenceWithoutAnEventPerRef(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "start")
	gitDir := filepath.Join(dir, ".git")
	paths := watchGitWorkspace(t, dir)

	var refs strings.Builder
	for i := range 300 {
		fmt.Fprintf(&refs, "create refs/tags/v%d HEAD\n", i)
	}
	gitInput(t, dir, refs.String(), "update-ref", "--stdin")
	require.NoError(t, os.Mkdir(filepath.Join(gitDir, "marker"), 0o755))
	select {
	case p := <-paths:
		require.Equal(t, filepath.Join(gitDir, "marker"), p, "writes under .git/refs produce no event")
	case <-time.After(10 * time.Second):
		t.Fatal("no workspace change (the marker made in .git) within 10 s")
	}

	git(t, dir, "commit", "-q", "--allow-empty", "-m", "work")
	waitChange(t, paths, filepath.Join(gitDir, "COMMIT_EDITMSG"), "a commit writes the top level of .git")
}

// A repository that git init creates during the session counts as work
// from then on: its .git appearing, the add and the commit, and a step that
// writes only objects, each object even into a fan-out directory that is
// already there (so a long first add, once all 256 exist, is never silent).
// Before, a .git that was not there when the watch started was never
// watched: an agent that ran git init and committed showed no workspace
// evidence at all.
func TestAGitRepositoryCreatedDuringTheSessionCountsAsWork(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644))
	paths := watchGitWorkspace(t, dir)
	gitDir := filepath.Join(dir, ".git")

	git(t, dir, "init", "-q")
	waitChange(t, paths, gitDir, "git init makes .git, reported once it is watched")
	git(t, dir, "add", "main.go")
	waitChange(t, paths, filepath.Join(gitDir, "index"), "git add writes the index")
	git(t, dir, "commit", "-q", "-m", "start")
	waitChange(t, paths, filepath.Join(gitDir, "COMMIT_EDITMSG"), "git commit")

	blob := git(t, dir, "hash-object", "main.go")
	content, id := blobWithPrefix(blob[:2]) // main.go's fan-out directory exists
	require.Equal(t, id, gitInput(t, dir, content, "hash-object", "-w", "--stdin"))
	waitChange(t, paths, filepath.Join(gitDir, "objects", id[:2], id[2:]), "an object written into an existing fan-out directory")
}

// A repository nested in the workspace counts as work, whether it was there
// when the watch started or git init made it in a new directory later.
// Before, only the workspace's own top .git was watched, and only if it was
// there at the start: work in a nested repository showed nothing.
func TestANestedGitRepositoryCountsAsWork(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "vendor", "lib")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	git(t, lib, "init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(lib, "lib.go"), []byte("package lib\n"), 0o644))
	paths := watchGitWorkspace(t, dir)

	git(t, lib, "add", "lib.go")
	waitChange(t, paths, filepath.Join(lib, ".git", "index"), "git add in the repository nested before the watch")
	git(t, lib, "commit", "-q", "-m", "lib")
	waitChange(t, paths, filepath.Join(lib, ".git", "COMMIT_EDITMSG"), "git commit in the repository nested before the watch")

	tool := filepath.Join(dir, "tool")
	require.NoError(t, os.Mkdir(tool, 0o755))
	waitChange(t, paths, tool, "a new directory, reported once it is watched")
	git(t, tool, "init", "-q")
	waitChange(t, paths, filepath.Join(tool, ".git"), "git init in a new directory")
	git(t, tool, "commit", "-q", "--allow-empty", "-m", "tool")
	waitChange(t, paths, filepath.Join(tool, ".git", "COMMIT_EDITMSG"), "git commit in the repository nested after the watch")
}

// A git step that writes only objects counts as work with each object and
// pack file it writes, so that a first add of many files, a clone, a fetch
// or a gc that runs longer than the evidence TTL does not look idle:
// git hash-object and git repack write nothing at .git's top level.
// Before, .git/objects was not watched, and such a step showed nothing.
func TestAGitStepThatWritesOnlyObjectsCountsAsWork(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644))
	git(t, dir, "add", "main.go")
	git(t, dir, "commit", "-q", "-m", "start")
	objects := filepath.Join(dir, ".git", "objects")
	paths := watchGitWorkspace(t, dir)

	blob := git(t, dir, "hash-object", "main.go")
	content, id := blobWithPrefix(blob[:2])
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more.go"), []byte(content), 0o644))
	waitChange(t, paths, filepath.Join(dir, "more.go"), "the agent's file")
	require.Equal(t, id, git(t, dir, "hash-object", "-w", "more.go"))
	waitChange(t, paths, filepath.Join(objects, id[:2], id[2:]), "a loose object written into an existing fan-out directory")

	git(t, dir, "repack", "-a", "-d", "-q")
	waitChange(t, paths, filepath.Join(objects, "pack")+"/", "git repack writes a pack")
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
	require.Equal(t, filepath.Join(dir, "main.go"), testwait.For(t, paths, "the workspace change main.go"))
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
