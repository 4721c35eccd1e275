package file_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// Open is pointed at files that are not store files, or at a store file
// through hostile paths. Whatever it refuses, it leaves byte for byte.

// eventLine is one complete line as the store writes it, newline included.
func eventLine(id string, seq uint64) string {
	return `{"event_id":"` + id + `","seq":` + strconv.FormatUint(seq, 10) + `,"aggregate_type":"runtime_control","aggregate_id":"agg","event_kind":"runtime.watchdog.resume","window":1}` + "\n"
}

// requireRefusedUntouched opens path, expects a *CorruptError naming line,
// and checks that the file still holds exactly want.
func requireRefusedUntouched(t *testing.T, path string, line int, want []byte) {
	t.Helper()
	s, err := file.Open(path)
	if err == nil {
		s.Close()
	}
	var ce *file.CorruptError
	require.ErrorAs(t, err, &ce, "Open must refuse the file")
	assert.Equal(t, path, ce.Path)
	assert.Equal(t, line, ce.Line)
	assert.Contains(t, err.Error(), path+":"+strconv.Itoa(line))
	got, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	assert.Equal(t, string(want), string(got), "a refused file is never modified")
}

func TestOpenRefusesASymlinkAtItsPath(t *testing.T) {
	t.Run("to a token file", func(t *testing.T) {
		dir := t.TempDir()
		token := filepath.Join(dir, "token")
		require.NoError(t, os.WriteFile(token, []byte("ghp_0123456789abcdef"), 0o600))
		path := filepath.Join(dir, "events.jsonl")
		if err := os.Symlink(token, path); err != nil {
			t.Skipf("cannot create a symlink here: %v", err)
		}
		_, err := file.Open(path)
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), "symbolic link")
		got, _ := os.ReadFile(token)
		assert.Equal(t, "ghp_0123456789abcdef", string(got), "the link's target is untouched")
		fi, lerr := os.Lstat(path)
		require.NoError(t, lerr)
		assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link itself is untouched")
	})
	t.Run("to a store file", func(t *testing.T) {
		dir := t.TempDir()
		real := filepath.Join(dir, "real.jsonl")
		require.NoError(t, os.WriteFile(real, []byte(eventLine("e1", 1)), 0o600))
		path := filepath.Join(dir, "events.jsonl")
		if err := os.Symlink(real, path); err != nil {
			t.Skipf("cannot create a symlink here: %v", err)
		}
		_, err := file.Open(path)
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument, "even a link to a valid store is not followed")
		assert.Contains(t, err.Error(), "symbolic link")
	})
	t.Run("dangling", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "elsewhere")
		path := filepath.Join(dir, "events.jsonl")
		if err := os.Symlink(target, path); err != nil {
			t.Skipf("cannot create a symlink here: %v", err)
		}
		_, err := file.Open(path)
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), "symbolic link")
		_, serr := os.Lstat(target)
		require.ErrorIs(t, serr, os.ErrNotExist, "Open does not create the link's target")
	})
}

func TestOpenRefusesAPathThatIsNotARegularFile(t *testing.T) {
	path := t.TempDir()
	_, err := file.Open(path)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "not a regular file")
}

func TestOpenLeavesAOneLineTokenFileUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	token := []byte("ghp_0123456789abcdef")
	require.NoError(t, os.WriteFile(path, token, 0o600))
	requireRefusedUntouched(t, path, 1, token)
}

// Bytes after the last newline are truncated only when they are
// recognisably an event of this store cut short; anything else is refused.
func TestOpenLeavesATailThatIsNotATornEventUntouched(t *testing.T) {
	valid := eventLine("e1", 1)
	cases := map[string]struct {
		data string
		line int
	}{
		"a one-line JSON config":               {`{"listen":":8080","debug":true}`, 1},
		"a one-line JSON config cut short":     {`{"listen":":80`, 1},
		"a key=value config":                   {"listen=:8080", 1},
		"a file of NUL bytes":                  {"\x00\x00\x00\x00", 1},
		"text after a valid line":              {valid + "hello", 2},
		"a JSON config after a valid line":     {valid + `{"listen":":8080"}`, 2},
		"a complete invalid event, no \\n":     {valid + `{"event_id":"e2","seq":2}`, 2},
		"a complete event whose seq goes back": {valid + strings.TrimSuffix(eventLine("e2", 1), "\n"), 2},
		"a syntax error inside a torn event":   {valid + `{"event_id":"e2",,"seq":`, 2},
		"a torn event after a space":           {valid + ` {"event_id":"e2","se`, 2},
		"a torn event then more text":          {valid + `{"event_id":"e2"` + "\x00\x00x", 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.data), 0o600))
			requireRefusedUntouched(t, path, tc.line, []byte(tc.data))
		})
	}
}

func TestAppendRefusesASeqPastTheMaximum(t *testing.T) {
	ctx := context.Background()
	t.Run("the last seq is the maximum", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		data := []byte(eventLine("e1", 1) + eventLine("last", math.MaxUint64))
		require.NoError(t, os.WriteFile(path, data, 0o600))
		s := openStore(t, path)
		err := s.Append(ctx, fileEvent("next", "agg", watchdog.KindStop, 1))
		require.ErrorIs(t, err, watchdog.ErrInvalidEvent, "a refusal for good: no retry can cure it")
		assert.Contains(t, err.Error(), "next", "the error names the event")
		assert.Contains(t, err.Error(), "seq")
		assert.False(t, errors.Is(err, watchdog.ErrAlreadyDecided))
		got, _ := os.ReadFile(path)
		assert.Equal(t, string(data), string(got), "nothing in the file is damaged")
		evs := load(t, s, "agg")
		require.Len(t, evs, 2)
		assert.Equal(t, uint64(math.MaxUint64), evs[1].Seq)
		require.NoError(t, s.Append(ctx, fileEvent("last", "agg", watchdog.KindResume, 1)), "re-append of a known id is still a no-op")
		require.NoError(t, s.Close())
		openStore(t, path) // and it still opens
	})
	t.Run("a batch that would pass it", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		data := []byte(eventLine("e1", math.MaxUint64-1))
		require.NoError(t, os.WriteFile(path, data, 0o600))
		s := openStore(t, path)
		err := s.Append(ctx, fileEvent("fits", "agg", watchdog.KindResume, 1), fileEvent("over", "agg", watchdog.KindStop, 1))
		require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
		assert.Contains(t, err.Error(), "over", "the error names the first event that does not fit")
		got, _ := os.ReadFile(path)
		assert.Equal(t, string(data), string(got), "the batch is refused whole")
		require.NoError(t, s.Append(ctx, fileEvent("fits", "agg", watchdog.KindResume, 1)), "the events that fit are recorded without it")
		evs := load(t, s, "agg")
		require.Len(t, evs, 2)
		assert.Equal(t, uint64(math.MaxUint64), evs[1].Seq)
		require.NoError(t, s.Close())
		s = openStore(t, path)
		assert.Len(t, load(t, s, "agg"), 2)
	})
}
