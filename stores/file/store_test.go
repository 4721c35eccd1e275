package file_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/stores/file"
	"github.com/sessionwatchdog/watchdog/storetest"
)

func openStore(t *testing.T, path string, opts ...file.Option) *file.Store {
	t.Helper()
	s, err := file.Open(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestFileStoreConformance(t *testing.T) {
	for _, p := range []file.SyncPolicy{file.SyncEveryAppend, file.SyncOnClose} {
		t.Run(p.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) watchdog.EventStore {
				return openStore(t, filepath.Join(t.TempDir(), "events.jsonl"), file.WithSync(p))
			})
		})
	}
}

// The conformance suite again, each subtest on a store reopened from the
// file the previous subtests wrote: the state rebuilt by Open
// (seq, ids, terminal windows) must behave like the one built by Append.
func TestFileStoreConformanceAcrossReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		return openStore(t, path, file.WithSync(file.SyncOnClose))
	})
}

// The suite with a retention on (see storetest's
// TestMemoryStoreConformanceWithRetention for why these bounds).
func TestFileStoreConformanceWithRetention(t *testing.T) {
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		return openStore(t, filepath.Join(t.TempDir(), "events.jsonl"), file.WithSync(file.SyncOnClose),
			file.WithRetention(watchdog.Retention{KeepWindows: 8, ForgetAfter: time.Hour}))
	})
}

func fileEvent(id, agg, kind string, window int) watchdog.Event {
	return watchdog.Event{
		ID: id, AggregateID: agg, Kind: kind, Window: window,
		SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0.Add(time.Second), ElapsedSeconds: 1, ConfiguredBudgetSeconds: 10,
	}
}

func TestFileStoreReopenResumesSeqAndArbitration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	s, err := file.Open(path)
	require.NoError(t, err)
	require.NoError(t, s.Append(ctx, fileEvent("e1", "a", watchdog.KindStart, 1), fileEvent("e2", "b", watchdog.KindStart, 1)))
	require.NoError(t, s.Append(ctx, fileEvent("e3", "a", watchdog.KindCancel, 1)))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close does nothing")

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(raw), "\n"), "one event per line")

	s = openStore(t, path)
	assert.Nil(t, s.TornTail())
	assert.Equal(t, path, s.Path())
	err = s.Append(ctx, fileEvent("e4", "a", watchdog.KindStop, 1))
	require.ErrorIs(t, err, watchdog.ErrAlreadyDecided, "the terminal of window 1 is known after reopening")
	require.NoError(t, s.Append(ctx, fileEvent("e3", "a", watchdog.KindCancel, 1)), "re-append of a known id is a no-op")
	require.NoError(t, s.Append(ctx, fileEvent("e5", "a", watchdog.KindResume, 2)))
	evs := load(t, s, "a")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindCancel, watchdog.KindResume}, kinds(evs))
	assert.Equal(t, []uint64{1, 3, 4}, []uint64{evs[0].Seq, evs[1].Seq, evs[2].Seq}, "seq continues after reopening")
}

func TestFileStoreRefusesASecondOpenOfTheSameFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	openStore(t, path)
	_, err := file.Open(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use")
}

func TestFileStoreBadInput(t *testing.T) {
	_, err := file.Open("")
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	_, err = file.Open(filepath.Join(t.TempDir(), "missing-dir", "events.jsonl"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = file.Open(filepath.Join(t.TempDir(), "x.jsonl"), file.WithSync(file.SyncPolicy(7)))
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.Equal(t, "SyncPolicy(7)", file.SyncPolicy(7).String())
}

func TestFileStoreAfterClose(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(filepath.Join(t.TempDir(), "events.jsonl"))
	require.NoError(t, err)
	sub, err := s.Subscribe(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, open := testwait.Recv(t, sub, "Close to close the subscription")
	assert.False(t, open, "Close closes every subscription")
	require.ErrorIs(t, s.Append(ctx, fileEvent("e1", "a", watchdog.KindStart, 1)), watchdog.ErrClosed)
	_, err = s.Load(ctx, "a")
	require.ErrorIs(t, err, watchdog.ErrClosed)
	_, err = s.Subscribe(ctx, "a")
	require.ErrorIs(t, err, watchdog.ErrClosed)
}

// writeLines writes a store file from events, then appends tail verbatim.
func writeStoreFile(t *testing.T, n int, tail string) (path string, full []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "events.jsonl")
	s, err := file.Open(path, file.WithSync(file.SyncOnClose))
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, s.Append(context.Background(), fileEvent("e"+string(rune('a'+i)), "agg", watchdog.KindResume, 1)))
	}
	require.NoError(t, s.Close())
	full, err = os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(tail)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path, full
}

func TestFileStoreTruncatesATornLastLineAndReportsIt(t *testing.T) {
	for name, tail := range map[string]string{
		"half an event":                  `{"event_id":"ez","seq":4,"aggregate_type":"runtime_con`,
		"a whole object but no newline":  `{"event_id":"ez","seq":4,"aggregate_type":"runtime_control","aggregate_id":"agg","event_kind":"runtime.watchdog.resume","window":1}`,
		"zeros from a power loss":        "\x00\x00\x00\x00\x00\x00",
		"one byte":                       "{",
		"the store's own line cut short": `{"aggregate_type":"runtime_control","event_id":"ez","seq":4,"aggregate_id":"ag`,
		"half an event, then zeros":      `{"aggregate_type":"runtime_control","event_id":"ez","se` + "\x00\x00\x00\x00",
		"cut inside a UTF-8 character":   `{"event_id":"ez","seq":4,"aggregate_id":"` + "\xc3",
	} {
		t.Run(name, func(t *testing.T) {
			path, complete := writeStoreFile(t, 3, tail)
			core, logs := observer.New(zap.WarnLevel)
			s := openStore(t, path, file.WithLogger(zap.New(core)))

			torn := s.TornTail()
			require.NotNil(t, torn)
			assert.Equal(t, file.TornTail{Path: path, Line: 4, Offset: int64(len(complete)), Bytes: int64(len(tail))}, *torn)
			assert.Contains(t, torn.String(), path+":4")
			require.Equal(t, 1, logs.Len(), "the repair is logged as a warning")
			assert.Equal(t, int64(4), logs.All()[0].ContextMap()["line"])

			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, complete, raw, "exactly the torn bytes are gone")
			evs := load(t, s, "agg")
			require.Len(t, evs, 3, "every complete event survives")

			require.NoError(t, s.Append(context.Background(), fileEvent("ez", "agg", watchdog.KindStop, 1)))
			evs = load(t, s, "agg")
			assert.Equal(t, uint64(4), evs[3].Seq)
		})
	}
}

// A file whose only line is torn (the first Append was cut short) is
// emptied: the torn line is the whole file.
func TestOpenTruncatesATornEventAtTheFileStart(t *testing.T) {
	for _, tail := range []string{`{"aggregate_type":"runtime_control","event_id":"e1","se`, `{"event_id":"e1","seq":1,"aggr`, `{`} {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		require.NoError(t, os.WriteFile(path, []byte(tail), 0o600))
		s := openStore(t, path)
		require.NotNil(t, s.TornTail())
		assert.Equal(t, file.TornTail{Path: path, Line: 1, Offset: 0, Bytes: int64(len(tail))}, *s.TornTail())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Empty(t, raw)
		require.NoError(t, s.Append(context.Background(), fileEvent("e1", "agg", watchdog.KindStart, 1)))
		assert.Equal(t, uint64(1), load(t, s, "agg")[0].Seq)
	}
}

func TestFileStoreCorruptLineIsAnErrorNamingFileAndLine(t *testing.T) {
	good := func(id string, seq int, kind string) string {
		return `{"event_id":"` + id + `","seq":` + string(rune('0'+seq)) + `,"aggregate_type":"runtime_control","aggregate_id":"agg","event_kind":"` + kind + `","window":1,"session_started_at":"2026-05-23T09:00:00Z","window_started_at":"2026-05-23T09:00:00Z","occurred_at":"2026-05-23T09:00:00Z","elapsed_seconds":0,"configured_budget_seconds":10}`
	}
	cases := map[string]struct {
		lines []string
		line  int
		want  string
	}{
		"garbage in the middle":       {[]string{good("a", 1, watchdog.KindStart), "not json", good("c", 3, watchdog.KindResume)}, 2, "not a JSON object"},
		"truncated object in middle":  {[]string{good("a", 1, watchdog.KindStart), `{"event_id":"b","seq":2`, good("c", 3, watchdog.KindResume)}, 2, "unexpected end"},
		"empty line":                  {[]string{good("a", 1, watchdog.KindStart), "", good("c", 3, watchdog.KindResume)}, 2, "not a JSON object"},
		"corrupt last complete line":  {[]string{good("a", 1, watchdog.KindStart), `{"event_id":`}, 2, "unexpected end"},
		"invalid event":               {[]string{strings.Replace(good("a", 1, watchdog.KindStart), `"window":1`, `"window":0`, 1)}, 1, "window 0"},
		"missing seq":                 {[]string{strings.Replace(good("a", 1, watchdog.KindStart), `"seq":1,`, ``, 1)}, 1, "no seq"},
		"seq going back":              {[]string{good("a", 2, watchdog.KindStart), good("b", 1, watchdog.KindResume)}, 2, "does not increase"},
		"repeated event id":           {[]string{good("a", 1, watchdog.KindStart), good("a", 2, watchdog.KindResume)}, 2, "appears twice"},
		"two terminals in one window": {[]string{good("a", 1, watchdog.KindCancel), good("b", 2, watchdog.KindStop)}, 2, "already ended"},
		"wrong type":                  {[]string{strings.Replace(good("a", 1, watchdog.KindStart), `"window":1`, `"window":"1"`, 1)}, 1, "cannot unmarshal"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o600))
			before, _ := os.ReadFile(path)
			_, err := file.Open(path)
			var ce *file.CorruptError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, path, ce.Path)
			assert.Equal(t, tc.line, ce.Line)
			assert.Contains(t, err.Error(), path+":"+string(rune('0'+tc.line)))
			assert.Contains(t, err.Error(), tc.want)
			after, _ := os.ReadFile(path)
			assert.Equal(t, before, after, "a corrupt file is never modified")
			// The lock was released: a fixed file opens.
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			openStore(t, path)
		})
	}
}

// Extra fields holding raw JSON with newlines stay on one line.
func TestFileStoreKeepsOneEventPerLine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	s := openStore(t, path)
	e := fileEvent("e1", "a", watchdog.KindStart, 1)
	e.Extra = map[string]json.RawMessage{"x_pretty": json.RawMessage("{\n  \"a\": [1,\n 2]\n}")}
	require.NoError(t, s.Append(ctx, e))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(raw), "\n"))
	assert.Contains(t, string(raw), `"x_pretty":{"a":[1,2]}`)
	bad := fileEvent("e2", "a", watchdog.KindResume, 1)
	bad.Extra = map[string]json.RawMessage{"x_bad": json.RawMessage("{nope")}
	require.ErrorIs(t, s.Append(ctx, bad), watchdog.ErrInvalidEvent)
}

// A Watchdog on a file Store: the process "restarts" (Close, reopen) and a
// new Watchdog resumes the session with its original session_started_at.
func TestFileStoreWatchdogResumeAfterRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	mock := newMock()
	store, err := file.Open(path)
	require.NoError(t, err)
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w.Start(ctx, "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	advance(t, mock, 4*time.Second, w)
	require.NoError(t, w.Close(ctx))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrClosed)
	require.NoError(t, store.Close())

	store2 := openStore(t, path)
	w2 := newWatchdog(t, mock, store2)
	s2, err := w2.Resume(ctx, "s", watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, t0, s2.StartedAt())
	assert.Equal(t, 1, s2.Window(), "no terminal event: the same window continues")
	advance(t, mock, 6*time.Second+time.Nanosecond, w2)
	require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrWallClockExceeded)
	require.NoError(t, w2.Check(ctx))
	evs := load(t, store2, "s")
	require.GreaterOrEqual(t, len(evs), 3)
	assert.Equal(t, []string{watchdog.KindStart, watchdog.KindResume}, kinds(evs[:2]))
	assert.Equal(t, watchdog.KindCancel, evs[len(evs)-1].Kind)
	assert.Equal(t, 1, countKind(evs, watchdog.KindCancel))
	for _, e := range evs {
		assert.Equal(t, t0, e.SessionStartedAt)
	}
}

func TestFileStoreSubscribeFollow(t *testing.T) {
	ctx := context.Background()
	store := openStore(t, filepath.Join(t.TempDir(), "events.jsonl"))
	mock := newMock()
	w := newWatchdog(t, mock, store)
	_, err := w.Start(ctx, "s", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Check(ctx))
	fctx, stop, err := watchdog.Follow(ctx, store, "s", watchdog.WithClock(mock))
	require.NoError(t, err)
	defer stop()
	advance(t, mock, 2*time.Second, w)
	testwait.For(t, fctx.Done(), "the follower's context to end")
	var v *watchdog.VerdictError
	require.True(t, errors.As(context.Cause(fctx), &v))
	assert.Equal(t, "watchdog_wall_clock_exceeded", v.StopReasonCode())
}

// Close ends every subscription and waits for its goroutine: synctest.Test
// fails if any goroutine started inside the bubble outlives it. A Watchdog
// on the Store, inside the same bubble, records its cancel to the file.
func TestFileStoreCloseLeavesNoGoroutine(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store, err := file.Open(filepath.Join(dir, "events.jsonl"))
		require.NoError(t, err)
		w := watchdog.New(watchdog.WithStore(store))
		subCtx, cancelSub := context.WithCancel(ctx)
		ended, err := store.Subscribe(subCtx, "s")
		require.NoError(t, err)
		live, err := store.Subscribe(ctx, "s")
		require.NoError(t, err)
		s, err := w.Start(ctx, "s", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-s.Context().Done()
		require.NoError(t, w.Close(ctx))
		assert.Equal(t, watchdog.KindStart, (<-live).Kind)
		for e := range live { // the cancel (after any non-terminal record)
			if e.Terminal() {
				assert.Equal(t, watchdog.KindCancel, e.Kind)
				break
			}
		}
		cancelSub()
		for range ended {
		}
		require.NoError(t, store.Close())
		_, open := <-live
		assert.False(t, open)
	})
}

// JSON cannot carry invalid UTF-8: such an id would come back as another id
// after a reopen, so the store refuses it for good.
func TestFileStoreRefusesInvalidUTF8Ids(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "events.jsonl"))
	for _, e := range []watchdog.Event{
		fileEvent("e\xff", "a", watchdog.KindStart, 1),
		fileEvent("e1", "a\xfe", watchdog.KindStart, 1),
		fileEvent("e1", "a", "kind\xff", 1),
	} {
		require.ErrorIs(t, s.Append(context.Background(), e), watchdog.ErrInvalidEvent)
	}
}
