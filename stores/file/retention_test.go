package file_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// fileLines decodes every line of the store's file, as the inspector does.
func fileLines(t *testing.T, path string) []watchdog.Event {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []watchdog.Event
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var e watchdog.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

func windowsOf(evs []watchdog.Event) []int {
	var out []int
	for _, e := range evs {
		if !slices.Contains(out, e.Window) {
			out = append(out, e.Window)
		}
	}
	return out
}

func TestFileStoreWithRetentionRefusesNegativeFieldsNamingThem(t *testing.T) {
	for field, r := range map[string]watchdog.Retention{
		"KeepWindows": {KeepWindows: -2},
		"ForgetAfter": {ForgetAfter: -time.Minute},
	} {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		s, err := file.Open(path, file.WithRetention(r))
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), field)
		assert.Contains(t, err.Error(), path)
		assert.Nil(t, s)
		assert.NoFileExists(t, path, "nothing created")
	}
}

// A Watchdog on a file store with a retention, over many sessions: the
// file is compacted while it runs, yet a session opened at the start is
// whole, Resume continues it after a reopen, the file reads as a log (seq
// increasing, verify's Replay finds nothing wrong), and it holds only what
// the retention keeps.
func TestFileStoreCompactsTheFileWhileResumeAndReplayWorkAcrossIt(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	r := file.WithRetention(watchdog.Retention{KeepWindows: 1, ForgetAfter: 5 * time.Minute})
	store := openStore(t, path, file.WithSync(file.SyncOnClose), r)
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	open, err := w.Start(ctx, "open", t0, watchdog.Policy{WallClock: 24 * time.Hour})
	require.NoError(t, err)
	var written int
	var prev int64
	shrunk := 0
	for round := range 25 {
		for i := range 60 {
			_, err := w.Start(ctx, fmt.Sprintf("c%d-%d", round, i), mock.Now(), watchdog.Policy{WallClock: 30 * time.Second})
			require.NoError(t, err)
		}
		advance(t, mock, time.Minute, w) // every one is cancelled
		written += 180
		st, err := os.Stat(path)
		require.NoError(t, err)
		if st.Size() < prev {
			shrunk++
		}
		prev = st.Size()
	}
	open.Touch(watchdog.ChannelStdout)
	require.NoError(t, w.Close(ctx))
	evs := load(t, store, "c24-0")
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.Empty(t, load(t, store, "c0-0"), "forgotten 5 minutes after its end")
	assert.Positive(t, shrunk, "the file was compacted while the Watchdog ran")
	require.NoError(t, store.Close()) // compacts what is left

	lines := fileLines(t, path)
	assert.Less(t, len(lines), written/3, "the file holds what the retention keeps")
	for i := 1; i < len(lines); i++ {
		require.Greater(t, lines[i].Seq, lines[i-1].Seq, "seq increases through the file")
	}
	sessions := map[string]bool{}
	for _, e := range lines {
		sessions[e.AggregateID] = true
	}
	assert.True(t, sessions["open"])
	assert.False(t, sessions["c0-0"])
	assert.Len(t, sessions, 1+5*60, "the open session and those of the last 5 minutes")
	ms, err := watchdog.Replay(lines)
	require.NoError(t, err)
	assert.Empty(t, ms, "verify finds the compacted log self-consistent")

	// Reopened, the store holds what it held; Resume continues the open
	// window from its start.
	store2 := openStore(t, path, r)
	assert.Equal(t, kinds(evs), kinds(load(t, store2, "c24-0")))
	w2 := newWatchdog(t, mock, store2)
	s, err := w2.Resume(ctx, "open", watchdog.Policy{WallClock: 24 * time.Hour})
	require.NoError(t, err)
	assert.Equal(t, 1, s.Window())
	assert.Equal(t, t0, s.StartedAt())
	assert.Equal(t, t0, s.Snapshot().WindowStartedAt, "the window goes on")
	_, err = file.Open(path)
	require.Error(t, err, "the compacted file is locked like the first")
}

// The forgotten events that close the file are kept by a compaction, so
// that seq goes on after them: seq never repeats in a store's file.
func TestFileStoreCompactionKeepsTheLastLineSoSeqNeverRepeats(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	r := file.WithRetention(watchdog.Retention{KeepWindows: 1})
	s := openStore(t, path, r)
	require.NoError(t, s.Append(ctx, fileEvent("e1", "s", watchdog.KindStart, 1), fileEvent("e2", "s", watchdog.KindStop, 1),
		fileEvent("e3", "s", watchdog.KindResume, 2), fileEvent("e4", "s", watchdog.KindStop, 2)))
	require.NoError(t, s.Append(ctx, fileEvent("e5", "s", watchdog.KindVerdict, 1))) // late: forgotten at once
	assert.Equal(t, []int{2}, windowsOf(load(t, s, "s")))
	require.NoError(t, s.Close())
	var ids []string
	for _, e := range fileLines(t, path) {
		ids = append(ids, e.ID)
	}
	assert.Equal(t, []string{"e3", "e4", "e5"}, ids, "window 1 compacted away; the last line kept")

	s2 := openStore(t, path, r)
	require.NoError(t, s2.Append(ctx, fileEvent("e6", "s", watchdog.KindResume, 3)))
	evs := load(t, s2, "s")
	assert.Equal(t, uint64(6), evs[len(evs)-1].Seq)
}

// A store file opened with a retention forgets what the retention would
// have forgotten, and is compacted by Open.
func TestFileStoreOpenedWithRetentionForgetsWhatTheAppendsWouldHave(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	s := openStore(t, path)
	for w := 1; w <= 5; w++ {
		require.NoError(t, s.Append(ctx, fileEvent(fmt.Sprintf("r%d", w), "s", watchdog.KindResume, w), fileEvent(fmt.Sprintf("x%d", w), "s", watchdog.KindStop, w)))
	}
	require.NoError(t, s.Close())
	s2 := openStore(t, path, file.WithRetention(watchdog.Retention{KeepWindows: 2}))
	assert.Equal(t, []int{4, 5}, windowsOf(load(t, s2, "s")))
	assert.Len(t, fileLines(t, path), 4, "compacted by Open")
	err := s2.Append(ctx, fileEvent("late", "s", watchdog.KindCancel, 2))
	require.ErrorIs(t, err, watchdog.ErrAlreadyDecided, "a window below the oldest kept ended before it")
	require.NoError(t, s2.Append(ctx, fileEvent("r6", "s", watchdog.KindResume, 6)))
}

func TestFileStoreOpenRemovesAnInterruptedCompactionsFileOnlyWithARetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path+".compact", []byte("half a compaction"), 0o600))
	s := openStore(t, path)
	require.NoError(t, s.Close())
	assert.FileExists(t, path+".compact", "a store with no retention never compacts: the name is not its")
	s = openStore(t, path, file.WithRetention(watchdog.Retention{KeepWindows: 1}))
	require.NoError(t, s.Close())
	assert.NoFileExists(t, path+".compact")
}

// A compaction that cannot be done (here path.compact cannot be removed)
// changes nothing: the file keeps every line, and says why in the log.
func TestFileStoreCompactionThatFailsLosesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Join(path+".compact", "x"), 0o700))
	core, logs := observer.New(zapcore.WarnLevel)
	s := openStore(t, path, file.WithRetention(watchdog.Retention{KeepWindows: 1}), file.WithLogger(zap.New(core)))
	require.NoError(t, s.Append(ctx, fileEvent("e1", "s", watchdog.KindStart, 1), fileEvent("e2", "s", watchdog.KindStop, 1),
		fileEvent("e3", "s", watchdog.KindResume, 2), fileEvent("e4", "s", watchdog.KindStop, 2)))
	require.NoError(t, s.Close(), "the compaction in Close fails, Close does not")
	require.Equal(t, 1, logs.FilterMessageSnippet("compaction failed").Len())
	assert.Len(t, fileLines(t, path), 4, "every line is still there")
}

func TestFileStoreCompactionKeepsTheFilesMode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, nil, 0o640))
	require.NoError(t, os.Chmod(path, 0o640))
	before, err := os.Stat(path)
	require.NoError(t, err)
	s := openStore(t, path, file.WithRetention(watchdog.Retention{KeepWindows: 1}))
	require.NoError(t, s.Append(ctx, fileEvent("e1", "s", watchdog.KindStart, 1), fileEvent("e2", "s", watchdog.KindStop, 1),
		fileEvent("e3", "s", watchdog.KindResume, 2), fileEvent("e4", "s", watchdog.KindStop, 2)))
	require.NoError(t, s.Close())
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.False(t, os.SameFile(before, after), "compacted")
	assert.Equal(t, os.FileMode(0o640), after.Mode().Perm())
	assert.False(t, strings.Contains(fmt.Sprint(fileLines(t, path)), "e1"))
}
