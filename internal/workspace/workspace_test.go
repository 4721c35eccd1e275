//go:build linux

package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// monitor starts a Monitor watching root with the default ignore rules and
// returns the paths of the changes it counts, in the order it sees them.
func monitor(t *testing.T, root string) <-chan string {
	t.Helper()
	m, err := New(zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	paths, done := make(chan string, 256), make(chan struct{})
	t.Cleanup(func() { close(done) }) // before Close: changed never blocks it
	stop, err := m.Watch(root, []string{".git"}, func(p string) {
		select {
		case paths <- p:
		case <-done:
		}
	})
	require.NoError(t, err)
	t.Cleanup(stop)
	return paths
}

// next returns the next change, failing the test, with what it waited for,
// if none comes within 10 s: a change is reported as soon as the Monitor
// reads it.
func next(t *testing.T, paths <-chan string, what string) string {
	t.Helper()
	select {
	case p := <-paths:
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("no change within 10 s: %s", what)
		return ""
	}
}

// until reads changes until want, which it returns.
func until(t *testing.T, paths <-chan string, want string) {
	t.Helper()
	for next(t, paths, want) != want {
	}
}

// A watched directory's role is published with its registration, under the
// Monitor's lock, so the Monitor's goroutine reads it without a race when
// it handles a change right after Watch returns. The change here is a
// mkdir, a plain system call through which the race detector orders
// nothing (a write would). Before, Watch marked .git flat after
// registering it, without the lock, and this failed under -race.
func TestAChangeRightAfterWatchReadsTheDirectoryRolesWithoutARace(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git"), 0o755))
	paths := monitor(t, root)
	require.NoError(t, os.Mkdir(filepath.Join(root, "src"), 0o755))
	require.Equal(t, filepath.Join(root, "src"), next(t, paths, "the new directory"))
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git", "refs"), 0o755))
	require.Equal(t, filepath.Join(root, ".git", "refs"), next(t, paths, "a new entry of .git"))
}

// A .git made after the watch started is followed as a repository: its
// top level, then its objects/ when it is made, then each directory made in
// objects/ (a fan-out directory of loose objects), every change of their
// entries counted; a directory made elsewhere in .git (refs/) is reported
// but not watched, so what is written in it is no event. inotify delivers
// events in order: the marker coming right after refs/ proves that.
func TestARepositoryMadeAfterTheWatchIsFollowedToItsObjects(t *testing.T) {
	root := t.TempDir()
	paths := monitor(t, root)
	git := filepath.Join(root, ".git")
	for _, dir := range []string{git, filepath.Join(git, "objects"), filepath.Join(git, "objects", "ab")} {
		require.NoError(t, os.Mkdir(dir, 0o755))
		until(t, paths, dir)
	}
	require.NoError(t, os.WriteFile(filepath.Join(git, "objects", "ab", "cdef"), []byte("blob"), 0o444))
	until(t, paths, filepath.Join(git, "objects", "ab", "cdef"))

	require.NoError(t, os.Mkdir(filepath.Join(git, "refs"), 0o755))
	until(t, paths, filepath.Join(git, "refs"))
	require.NoError(t, os.Mkdir(filepath.Join(git, "refs", "tags"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(git, "refs", "tags", "v1"), []byte("ab"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(git, "marker"), 0o755))
	require.Equal(t, filepath.Join(git, "marker"), next(t, paths, "the marker"), "writes under .git/refs are no event")
}

// Sync returns once every change made before it has been handled: the
// watch's callback has run for each, in order, and Sync's own sentinel is
// not reported to any watch.
func TestSyncReturnsOnceEveryEarlierChangeIsHandled(t *testing.T) {
	root := t.TempDir()
	m, err := New(zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	var mu sync.Mutex
	var seen []string
	stop, err := m.Watch(root, []string{".git"}, func(p string) {
		mu.Lock()
		seen = append(seen, filepath.Base(p))
		mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(stop)
	for round := range 3 {
		want := []string{}
		for i := range 20 {
			name := fmt.Sprintf("f%d-%d", round, i)
			require.NoError(t, os.WriteFile(filepath.Join(root, name), nil, 0o600))
			want = append(want, name)
		}
		require.NoError(t, m.Sync(context.Background()))
		mu.Lock()
		got := slices.Compact(slices.Clone(seen)) // a write is a create and a close-write
		seen = seen[:0]
		mu.Unlock()
		require.Equal(t, want, got, "round %d", round)
	}
	var nilMonitor *Monitor
	require.NoError(t, nilMonitor.Sync(context.Background()))
	m.Close()
	require.ErrorIs(t, m.Sync(context.Background()), ErrClosed)
}
