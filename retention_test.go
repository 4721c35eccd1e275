package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

func retainingStore(t *testing.T, r watchdog.Retention) *watchdog.MemoryStore {
	t.Helper()
	m, err := watchdog.NewMemoryStoreWithRetention(r)
	require.NoError(t, err)
	return m
}

// windowsOf returns the distinct windows of evs, in order.
func windowsOf(evs []watchdog.Event) []int {
	var out []int
	for _, e := range evs {
		if !slices.Contains(out, e.Window) {
			out = append(out, e.Window)
		}
	}
	return out
}

func TestNewMemoryStoreWithRetentionRefusesNegativeFieldsNamingThem(t *testing.T) {
	for field, r := range map[string]watchdog.Retention{
		"KeepWindows": {KeepWindows: -1},
		"ForgetAfter": {ForgetAfter: -time.Second},
	} {
		m, err := watchdog.NewMemoryStoreWithRetention(r)
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), field)
		assert.Nil(t, m)
	}
}

// With KeepWindows 1 the store keeps the last ended window and the open
// one: Resume still finds the session's start and opens the next window.
func TestMemoryRetentionKeepsTheLastEndedWindowAndResumeStillWorks(t *testing.T) {
	ctx := context.Background()
	store := retainingStore(t, watchdog.Retention{KeepWindows: 1})
	mock := newMock()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour}
	s, err := w.Start(ctx, "s", t0, p)
	require.NoError(t, err)
	for range 4 {
		advance(t, mock, time.Second, w)
		require.NoError(t, s.Stop())
		require.NoError(t, w.Check(ctx))
		s, err = w.Resume(ctx, "s", p)
		require.NoError(t, err)
	}
	require.NoError(t, w.Check(ctx))
	evs := load(t, store, "s")
	assert.Equal(t, []int{4, 5}, windowsOf(evs), "window 4 (the last ended) and 5 (open)")
	assert.Equal(t, 5, s.Window())
	for _, e := range evs {
		assert.Equal(t, t0, e.SessionStartedAt, "session_started_at survives the forgotten windows")
	}
	// The open window is never forgotten, however long it runs.
	for range 3 {
		advance(t, mock, time.Minute, w)
	}
	require.NoError(t, s.Stop())
	require.NoError(t, w.Check(ctx))
	assert.Equal(t, []int{5}, windowsOf(load(t, store, "s")))
}

// ForgetAfter is measured on the events' occurred_at, that is on the
// Watchdog's clock: a mock clock drives it.
func TestMemoryRetentionForgetsAnEndedSessionOnceTheWatchdogsMockClockPassesForgetAfter(t *testing.T) {
	ctx := context.Background()
	store := retainingStore(t, watchdog.Retention{ForgetAfter: time.Hour})
	mock := newMock()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: 24 * time.Hour}
	start := func(id string) *watchdog.Session {
		s, err := w.Start(ctx, id, mock.Now(), p)
		require.NoError(t, err)
		require.NoError(t, w.Check(ctx))
		return s
	}
	old := start("old")
	start("open")
	again := start("again")
	advance(t, mock, time.Second, w)
	require.NoError(t, old.Stop())   // ends at t0+1s
	require.NoError(t, again.Stop()) // ends at t0+1s, resumed below
	require.NoError(t, w.Check(ctx))
	advance(t, mock, 30*time.Minute, w)
	_, err := w.Resume(ctx, "again", p)
	require.NoError(t, err)

	advance(t, mock, 30*time.Minute-time.Nanosecond, w)
	start("tick1") // occurs 1 ns before old's hour is up
	assert.NotEmpty(t, load(t, store, "old"), "forgotten before its hour")

	advance(t, mock, time.Nanosecond, w)
	start("tick2")
	assert.Empty(t, load(t, store, "old"), "an hour after its end")
	_, err = w.Resume(ctx, "old", p)
	require.ErrorIs(t, err, watchdog.ErrUnknownSession)
	assert.NotEmpty(t, load(t, store, "open"), "an open session is never forgotten")
	assert.Equal(t, []int{1, 2}, windowsOf(load(t, store, "again")), "a session resumed in time is kept whole")
}

// The store still arbitrates the terminal event of a window it forgot:
// there is none to add.
func TestMemoryRetentionRefusesATerminalEventForAForgottenWindow(t *testing.T) {
	ctx := context.Background()
	store := retainingStore(t, watchdog.Retention{KeepWindows: 1})
	ev := func(id, kind string, window int) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: "s", Kind: kind, Window: window, SessionStartedAt: t0, OccurredAt: t0}
	}
	require.NoError(t, store.Append(ctx, ev("e1", watchdog.KindStart, 1), ev("e2", watchdog.KindStop, 1),
		ev("e3", watchdog.KindResume, 2), ev("e4", watchdog.KindStop, 2)))
	assert.Equal(t, []int{2}, windowsOf(load(t, store, "s")))
	err := store.Append(ctx, ev("e5", watchdog.KindCancel, 1))
	require.ErrorIs(t, err, watchdog.ErrAlreadyDecided)
	assert.Contains(t, err.Error(), "forgotten")
	require.ErrorIs(t, store.Append(ctx, ev("e6", watchdog.KindCancel, 2)), watchdog.ErrAlreadyDecided)
	// A late non-terminal event of the forgotten window is accepted and
	// forgotten at once.
	require.NoError(t, store.Append(ctx, ev("e7", watchdog.KindVerdict, 1)))
	assert.Equal(t, []string{"e3", "e4"}, idsOf(load(t, store, "s")))
}

func idsOf(evs []watchdog.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// Racing terminal events get exactly one winner per window, also for the
// windows a KeepWindows of 1 forgets while the race runs.
func TestMemoryRetentionRacingTerminalsGetOneWinnerPerWindow(t *testing.T) {
	const racers, windows = 8, 16
	store := retainingStore(t, watchdog.Retention{KeepWindows: 1})
	var mu sync.Mutex
	wins := map[int]int{}
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			for w := 1; w <= windows; w++ {
				e := watchdog.Event{ID: fmt.Sprintf("r%d-w%d", r, w), AggregateID: "s", Kind: watchdog.KindCancel, Window: w, OccurredAt: t0}
				err := store.Append(context.Background(), e)
				if err != nil && !errors.Is(err, watchdog.ErrAlreadyDecided) {
					t.Error(err)
				}
				if err == nil {
					mu.Lock()
					wins[w]++
					mu.Unlock()
				}
			}
		})
	}
	testwait.Group(t, &wg, "the goroutines")
	for w := 1; w <= windows; w++ {
		assert.Equal(t, 1, wins[w], "window %d", w)
	}
}

// What a retention keeps still replays: each window kept is whole, its
// policy on its opening event and every outcome with its decision.
func TestMemoryRetentionKeepsWhatReplayNeeds(t *testing.T) {
	ctx := context.Background()
	store := retainingStore(t, watchdog.Retention{KeepWindows: 2})
	mock := newMock()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(ctx, "s", t0, settlePolicy())
	require.NoError(t, err)
	for i := range 5 {
		for j := 0; j < 60 && s.Context().Err() == nil; j++ {
			advance(t, mock, time.Second, w)
		}
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
		if i < 4 {
			s, err = w.Resume(ctx, "s", settlePolicy())
			require.NoError(t, err)
		}
	}
	require.NoError(t, w.Check(ctx))
	evs := load(t, store, "s")
	assert.Equal(t, []int{4, 5}, windowsOf(evs))
	assert.Positive(t, countKind(evs, watchdog.KindVerdict), "settle verdicts are replayed")
	assert.Equal(t, 2, countKind(evs, watchdog.KindDecision))
	ms, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, ms)
}

// A store that forgets releases the memory: its log is compacted, so it
// holds about what it keeps, not what it was given.
func TestMemoryRetentionReleasesTheLogOfForgottenSessions(t *testing.T) {
	ctx := context.Background()
	store := retainingStore(t, watchdog.Retention{ForgetAfter: time.Minute})
	for i := range 20000 {
		at := t0.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("s%d", i)
		require.NoError(t, store.Append(ctx,
			watchdog.Event{ID: id + "-start", AggregateID: id, Kind: watchdog.KindStart, Window: 1, OccurredAt: at},
			watchdog.Event{ID: id + "-stop", AggregateID: id, Kind: watchdog.KindStop, Window: 1, OccurredAt: at}))
	}
	logLen, live := watchdog.MemoryStoreSize(store)
	assert.Equal(t, 2*60, live, "the sessions that ended less than a minute before the last event")
	assert.LessOrEqual(t, logLen, 2*1024+2*live, "the log holds a chunk or so beyond what is kept")
}
