//go:build linux

package workspace

import (
	"os"
	"path/filepath"
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
	stop, err := m.Watch(root, []string{".git"}, []string{filepath.Join(root, ".git")}, func(p string) {
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
