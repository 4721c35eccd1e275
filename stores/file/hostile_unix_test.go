//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// dirWithMode returns a new directory with exactly mode (umask aside).
func dirWithMode(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, mode))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	return dir
}

// A FIFO (or a device) at the path would block Open or feed it endless
// bytes: it is refused before it is opened.
func TestOpenRefusesAFIFOAtItsPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err := file.Open(path)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "not a regular file")
}

// In a directory anyone may write to, anyone may replace the store's file:
// Open refuses it, and creates nothing there.
func TestOpenRefusesAWorldWritableDirectoryWithoutStickyBit(t *testing.T) {
	dir := dirWithMode(t, 0o777)
	path := filepath.Join(dir, "events.jsonl")
	_, err := file.Open(path)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "world-writable")
	_, serr := os.Lstat(path)
	require.ErrorIs(t, serr, os.ErrNotExist, "nothing was created")
}

// In a group-writable directory, or a world-writable one with the sticky
// bit (like /tmp), Open works but logs a warning naming the directory.
func TestOpenWarnsInAGroupOrWorldWritableDirectory(t *testing.T) {
	for name, mode := range map[string]os.FileMode{
		"group-writable":        0o770,
		"world-writable sticky": 0o777 | os.ModeSticky,
	} {
		t.Run(name, func(t *testing.T) {
			dir := dirWithMode(t, mode)
			core, logs := observer.New(zap.WarnLevel)
			openStore(t, filepath.Join(dir, "events.jsonl"), file.WithLogger(zap.New(core)))
			require.Equal(t, 1, logs.Len(), "one warning")
			entry := logs.All()[0]
			assert.Contains(t, entry.Message, "directory")
			assert.Equal(t, dir, entry.ContextMap()["dir"])
		})
	}
	t.Run("owner-only", func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		openStore(t, filepath.Join(dirWithMode(t, 0o755), "events.jsonl"), file.WithLogger(zap.New(core)))
		assert.Equal(t, 0, logs.Len(), "no warning")
	})
}

// Open never changes an existing file's mode; it warns when others may
// write to the file.
func TestOpenKeepsAnExistingFilesModeAndWarnsWhenOthersCanWrite(t *testing.T) {
	for mode, warns := range map[os.FileMode]bool{0o644: false, 0o600: false, 0o664: true, 0o666: true} {
		t.Run(mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(eventLine("e1", 1)), 0o600))
			require.NoError(t, os.Chmod(path, mode))
			core, logs := observer.New(zap.WarnLevel)
			s := openStore(t, path, file.WithLogger(zap.New(core)))
			require.NoError(t, s.Close())
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, mode, fi.Mode().Perm(), "the mode is kept")
			if warns {
				require.Equal(t, 1, logs.Len())
				assert.Contains(t, logs.All()[0].Message, "writable")
				assert.Equal(t, path, logs.All()[0].ContextMap()["path"])
			} else {
				assert.Equal(t, 0, logs.Len())
			}
		})
	}
}

// A hard link at the path is another name of another program's file (or of
// a backup that shares the inode): the store would append its events into
// it, and a compaction would silently split the two names. Open refuses
// it, naming the path and the link count, and leaves the file as it was.
func TestOpenRefusesAHardLinkAtItsPath(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other-program.jsonl")
	content := []byte(eventLine("e1", 1))
	require.NoError(t, os.WriteFile(other, content, 0o600))
	path := filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.Link(other, path))
	_, err := file.Open(path)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "2 links")
	got, rerr := os.ReadFile(other)
	require.NoError(t, rerr)
	assert.Equal(t, content, got, "the other name's file is untouched")

	require.NoError(t, os.Remove(other)) // its only name again: Open takes it
	openStore(t, path)
}
