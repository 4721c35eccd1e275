package watchdog_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// hungStore is a MemoryStore whose Append, once hang is set, blocks until
// release is closed, ignoring its context: the worst a store can do.
type hungStore struct {
	*watchdog.MemoryStore
	mu      sync.Mutex
	hang    bool
	release chan struct{}
}

func newHungStore() *hungStore {
	return &hungStore{MemoryStore: watchdog.NewMemoryStore(), release: make(chan struct{})}
}

func (h *hungStore) Append(ctx context.Context, events ...watchdog.Event) error {
	h.mu.Lock()
	hang := h.hang
	h.mu.Unlock()
	if hang {
		<-h.release
	}
	return h.MemoryStore.Append(ctx, events...)
}

func (h *hungStore) setHang() {
	h.mu.Lock()
	h.hang = true
	h.mu.Unlock()
}

// Close returns by its context's deadline although the store's Append never
// returns, and names the events it could not record. The session was still
// cancelled on time: a hung store delays the record, never the verdict.
func TestCloseReturnsByItsDeadlineWhenTheStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newHungStore()
		defer close(store.release) // the hung Append returns at the end of the test
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		s, err := w.Start(context.Background(), "s", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		synctest.Wait() // the start event is recorded
		store.setHang()
		<-s.Context().Done()
		assert.Equal(t, time.Second+time.Nanosecond, time.Since(start), "cancelled on time")

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closeAt := time.Now()
		err = w.Close(ctx)
		assert.Equal(t, 5*time.Second, time.Since(closeAt), "Close returned at its deadline")
		require.ErrorIs(t, err, watchdog.ErrNotRecorded)
		assert.ErrorContains(t, err, "runtime.watchdog.decision")
		assert.ErrorContains(t, err, "runtime.watchdog.cancel")
		assert.ErrorContains(t, err, "the recorder goroutine")
	})
}

// Close returns by its deadline when an Observer hook blocks for good, and
// a blocked OnSchedulerTick delays no fire: it runs off the scheduler.
func TestStuckObserverHooksDelayNoFireAndNoClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		var once sync.Once
		entered := make(chan struct{})
		obs := watchdog.Observer{
			OnSchedulerTick: func(time.Duration) {
				once.Do(func() { close(entered) })
				<-release
			},
			OnEvent: func(e watchdog.Event) {
				if e.Kind == watchdog.KindCancel && e.AggregateID == "b" {
					<-release
				}
			},
		}
		w := watchdog.New(watchdog.WithObserver(obs))
		start := time.Now()
		a, err := w.Start(context.Background(), "a", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		b, err := w.Start(context.Background(), "b", start, watchdog.Policy{WallClock: 2 * time.Second})
		require.NoError(t, err)
		<-a.Context().Done()
		<-entered // the tick hook is stuck from now on
		<-b.Context().Done()
		assert.Equal(t, 2*time.Second+time.Nanosecond, time.Since(start), "the second fire was on time")

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = w.Close(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "Observer.OnSchedulerTick")
		assert.ErrorContains(t, err, "Observer.OnEvent")
	})
}

// panicStore panics in its first n Appends.
type panicStore struct {
	*watchdog.MemoryStore
	mu sync.Mutex
	n  int
}

func (p *panicStore) Append(ctx context.Context, events ...watchdog.Event) error {
	p.mu.Lock()
	boom := p.n > 0
	p.n--
	p.mu.Unlock()
	if boom {
		panic("store: nil map")
	}
	return p.MemoryStore.Append(ctx, events...)
}

// A store whose Append panics crashes nothing and loses nothing: the panic
// is an append failure, retried with backoff until the event is recorded.
func TestAPanickingStoreAppendLosesNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &panicStore{MemoryStore: watchdog.NewMemoryStore(), n: 3}
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-s.Context().Done()
		time.Sleep(time.Minute) // the retries' backoff
		synctest.Wait()
		assert.Equal(t, int64(3), w.Stats().Panics)
		require.NoError(t, w.Close(context.Background()))
		evs, err := store.Load(context.Background(), "s")
		require.NoError(t, err)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	})
}

// Observer hooks that panic crash nothing: the fire, its record and a
// handler under Call go on as without them, and no handler is left counted
// as running.
func TestPanickingObserverHooksCrashNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := watchdog.Observer{
			OnEvent:         func(watchdog.Event) { panic("OnEvent") },
			OnSchedulerTick: func(time.Duration) { panic("OnSchedulerTick") },
			OnHandler: func(ctx context.Context, _ watchdog.Layer, _ string, _ time.Duration) (context.Context, func(error, *watchdog.Event)) {
				panic("OnHandler")
			},
		}
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithObserver(obs))
		s, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		require.NoError(t, watchdog.Call(s.Context(), "tool", time.Second, func(context.Context) error { return nil }))
		err = watchdog.Call(s.Context(), "slow", time.Second, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		<-s.Context().Done()
		synctest.Wait()
		st := w.Stats()
		abandoned, running := st.AbandonedHandlers, st.AbandonedRunning
		assert.Zero(t, abandoned)
		assert.Zero(t, running)
		assert.GreaterOrEqual(t, st.Panics, int64(6), "OnHandler twice, OnEvent per event, OnSchedulerTick")
		require.NoError(t, w.Close(context.Background()))
		evs, err := store.Load(context.Background(), "s")
		require.NoError(t, err)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindHandlerDeadline, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	})
}

// panicLoadStore's Load panics once.
type panicLoadStore struct {
	*watchdog.MemoryStore
	mu   sync.Mutex
	boom bool
}

func (p *panicLoadStore) Load(ctx context.Context, id string) ([]watchdog.Event, error) {
	p.mu.Lock()
	boom := p.boom
	p.boom = false
	p.mu.Unlock()
	if boom {
		panic("store: Load")
	}
	return p.MemoryStore.Load(ctx, id)
}

// A Load that panics fails the Resume with an error and leaves the session
// id free: the next Resume of it works.
func TestAPanickingLoadFailsTheResumeAndFreesTheID(t *testing.T) {
	mock := newMock()
	store := &panicLoadStore{MemoryStore: watchdog.NewMemoryStore()}
	w1 := newWatchdog(t, mock, store)
	_, err := w1.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w1.Close(context.Background()))

	w2 := newWatchdog(t, mock, store)
	store.boom = true
	_, err = w2.Resume(context.Background(), "s", watchdog.Policy{WallClock: time.Hour})
	require.ErrorContains(t, err, "store Load panicked")
	assert.Equal(t, int64(1), w2.Stats().Panics)
	s, err := w2.Resume(context.Background(), "s", watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, 1, s.Window())
}

// fixedStore's Load returns its events whatever the id.
type fixedStore struct {
	*watchdog.MemoryStore
	events []watchdog.Event
}

func (f *fixedStore) Load(context.Context, string) ([]watchdog.Event, error) { return f.events, nil }

// Resume refuses what a store hands back that the Watchdog cannot continue
// from, with an error wrapping ErrInvalidEvent that names it, and leaves the
// id free: a window at the top of its type, another session's event, an
// instant it cannot time, an invalid event.
func TestResumeRefusesAStoresGarbage(t *testing.T) {
	base := watchdog.Event{ID: "e1", AggregateID: "s", Kind: watchdog.KindStart, Window: 1,
		SessionStartedAt: t0, WindowStartedAt: t0, OccurredAt: t0}
	for name, tc := range map[string]struct {
		edit func(e *watchdog.Event)
		want string
	}{
		"last window":      {func(e *watchdog.Event) { e.Kind, e.Window = watchdog.KindStop, 1<<31-1 }, "last one a session can have"},
		"another session":  {func(e *watchdog.Event) { e.AggregateID = "other" }, `of session "other"`},
		"untimeable start": {func(e *watchdog.Event) { e.SessionStartedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, "outside the years"},
		"window zero":      {func(e *watchdog.Event) { e.Window = 0 }, "window 0"},
	} {
		t.Run(name, func(t *testing.T) {
			e := base
			tc.edit(&e)
			mock := newMock()
			w := newWatchdog(t, mock, &fixedStore{MemoryStore: watchdog.NewMemoryStore(), events: []watchdog.Event{e}})
			_, err := w.Resume(context.Background(), "s", watchdog.Policy{})
			require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
			assert.ErrorContains(t, err, tc.want)
			_, err = w.Start(context.Background(), "s", t0, watchdog.Policy{})
			require.NoError(t, err, "the id is free again")
		})
	}
}

// Start refuses a start it cannot time instead of saturating it.
func TestStartRefusesAStartItCannotTime(t *testing.T) {
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	_, err := w.Start(context.Background(), "s", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.ErrorContains(t, err, "outside the years 1678 to 2262")
}

// faultyClock is a mock whose Now and AfterFunc panic while broken is set.
type faultyClock struct {
	*clock.Mock
	broken atomic.Bool
}

func (f *faultyClock) Now() time.Time {
	if f.broken.Load() {
		panic("clock: Now")
	}
	return f.Mock.Now()
}

func (f *faultyClock) AfterFunc(d time.Duration, fn func()) *clock.Timer {
	if f.broken.Load() {
		panic("clock: AfterFunc")
	}
	return f.Mock.AfterFunc(d, fn)
}

// A Clock that panics crashes nothing: while it is broken time stands
// still (its last reading), and once it works again the rules go on.
func TestAPanickingClockCrashesNothing(t *testing.T) {
	mock := &faultyClock{Mock: newMock()}
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(context.Background())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	mock.broken.Store(true)
	s.Touch(watchdog.ChannelStdout)
	_, err = w.Start(context.Background(), "t", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err, "started at the clock's last reading")
	require.NoError(t, w.Check(context.Background()))
	mock.broken.Store(false)
	assert.Positive(t, w.Stats().Panics)
	advance(t, mock.Mock, 10*time.Second+1, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
}

// While the store is down and the recorder's queue is full, new sessions
// are refused with back-pressure (an error wrapping ErrNotRecorded) instead
// of growing memory without bound; the sessions already watched still get
// their verdicts, and once the store is back the queue drains and Start
// works again.
func TestAFullRecorderQueueRefusesNewSessionsAndKeepsVerdicts(t *testing.T) {
	defer watchdog.SetMaxQueued(4)()
	mock := newMock()
	store := newHungStore()
	w := newWatchdog(t, mock, store)
	store.setHang()
	var ss []*watchdog.Session
	for i := range 4 {
		s, err := w.Start(context.Background(), fmt.Sprint("s", i), t0, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		ss = append(ss, s)
	}
	_, err := w.Start(context.Background(), "one-too-many", t0, watchdog.Policy{WallClock: time.Second})
	require.ErrorIs(t, err, watchdog.ErrNotRecorded)
	assert.ErrorContains(t, err, "retry when it catches up")

	mock.Add(time.Second + 1) // the store is still down: the verdicts are decided, and queued
	for _, s := range ss {
		testwait.For(t, s.Context().Done(), "the session's context to end")
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
	}
	close(store.release)
	require.NoError(t, w.Check(context.Background()))
	for _, s := range ss {
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store.MemoryStore, s.ID())))
	}
	_, err = w.Start(context.Background(), "after", mock.Now(), watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
}

// While the store is down and the queue is full, a session deferred by
// evidence does not grow the queue: its CONTINUE records fold into the
// latest, which keeps its place before the decision; the decision and the
// cancel are never folded; the log replays clean; Stats shows it all.
func TestAFullQueueFoldsASessionsRepeatedContinuesIntoTheLatest(t *testing.T) {
	defer watchdog.SetMaxQueued(4)()
	mock := newMock()
	store := newFaultyStore(1 << 30) // down
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "agent", t0, idlePolicy())
	require.NoError(t, err)
	for i := range 3 {
		_, err := w.Start(context.Background(), fmt.Sprint("filler", i), t0, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
	}
	s.Touch(watchdog.ChannelStdout)
	for range 10 { // file work every 4 s, no output: a CONTINUE at each look
		advance(t, mock, 4*time.Second, w)
		s.Touch(watchdog.ChannelWorkspace)
	}
	lastTouch := mock.Now()
	st := w.Stats()
	assert.Equal(t, 5, st.Queued, "four starts and one CONTINUE slot")
	assert.GreaterOrEqual(t, st.Coalesced, int64(5))
	assert.Equal(t, 4, st.Sessions)

	advance(t, mock, 20*time.Second, w) // quiet: the idle rule acts
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	assert.Equal(t, 3, w.Stats().Sessions)

	store.setFail(0) // the store is back
	advance(t, mock, time.Minute, w)
	require.Zero(t, w.Stats().Queued)
	evs := load(t, store.MemoryStore, "agent")
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindVerdict, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
	assert.True(t, evs[1].OccurredAt.After(lastTouch.Add(-4*time.Second)), "the latest CONTINUE is kept: %v", evs[1].OccurredAt)
	mismatches, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mismatches)
}

// laneHungStore hangs, ignoring its context, the first Append of session
// "stuck" until release is closed.
type laneHungStore struct {
	*watchdog.MemoryStore
	release chan struct{}
	once    sync.Once
}

func (h *laneHungStore) Append(ctx context.Context, events ...watchdog.Event) error {
	if events[0].AggregateID == "stuck" {
		first := false
		h.once.Do(func() { first = true })
		if first {
			<-h.release
		}
	}
	return h.MemoryStore.Append(ctx, events...)
}

// One session's hung write holds up the other sessions' records for 10 s
// only: then a fresh goroutine takes the recording over, and the hung
// event is retried after its backoff (a late success of the hung call is a
// duplicate the store skips). Nothing is lost or recorded twice.
func TestAHungAppendHoldsUpOtherSessionsRecordsForItsTimeoutOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &laneHungStore{MemoryStore: watchdog.NewMemoryStore(), release: make(chan struct{})}
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		_, err := w.Start(context.Background(), "stuck", start, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		other, err := w.Start(context.Background(), "other", start, watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-other.Context().Done()
		synctest.Wait()
		assert.Empty(t, load(t, store.MemoryStore, "other"), "held up behind the hung call")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, w.Stats().HungAppends, "visible as a metric")
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store.MemoryStore, "other")),
			"recorded once the hung call timed out")
		time.Sleep(time.Minute) // the hung event's retry
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "stuck")))
		close(store.release) // the hung call returns: a duplicate, skipped
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "stuck")), "recorded once")
		assert.Zero(t, w.Stats().HungAppends, "the stuck goroutine is gone")
		require.NoError(t, w.Close(context.Background()))
	})
}

// Stats says how far behind the store is: the age of the record waiting
// longest, which a fire's records keep while they wait behind a store that
// is down, and which falls to zero once the store takes them.
func TestStatsSaysHowLongTheOldestRecordHasWaited(t *testing.T) {
	mock := newMock()
	store := newFaultyStore(1 << 30) // down
	w := newWatchdog(t, mock, store)
	assert.Zero(t, w.Stats().OldestQueued)
	_, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	advance(t, mock, 30*time.Second, w)
	st := w.Stats()
	assert.Equal(t, 2, st.Queued, "the start record, and the fire's (its decision and cancel)")
	assert.Equal(t, 30*time.Second, st.OldestQueued, "the start record, queued at t0")

	store.mu.Lock()
	store.failN = 0 // the store is back
	store.mu.Unlock()
	advance(t, mock, time.Minute, w) // past the retry backoff
	st = w.Stats()
	assert.Zero(t, st.Queued)
	assert.Zero(t, st.OldestQueued)
}

// countingClock counts the timers armed on a mock: the scheduler arms one
// per pass that leaves a deadline to wait for.
type countingClock struct {
	*clock.Mock
	armed atomic.Int64
}

func (c *countingClock) AfterFunc(d time.Duration, f func()) *clock.Timer {
	c.armed.Add(1)
	return c.Mock.AfterFunc(d, f)
}

// A session started at an edge of the instants the Watchdog can time
// (1678, 2262) under the longest budget a Duration holds never makes the
// scheduler spin. Started in 1678, its 292-year budget ran out in 1970: it
// ends at once (before the fix, a saturated age never exceeded the budget
// while its instant, long past, came round at every pass). Started a
// second before the end of 2262, its deadline is past the end of the
// timeline and never comes (before the fix, it came at every pass once the
// clock reached the end).
func TestASessionAtTheEdgeOfTimeWithTheLongestBudgetNeverSpinsTheScheduler(t *testing.T) {
	longest := time.Duration(math.MaxInt64)
	for name, tc := range map[string]struct {
		clockAt, start time.Time
		p              watchdog.Policy
		ends           bool
	}{
		"started in 1678":   {t0, time.Unix(0, math.MinInt64).Add(time.Hour), watchdog.Policy{WallClock: longest, SessionCeiling: longest}, true},
		"idle since 1678":   {t0, time.Unix(0, math.MinInt64).Add(time.Hour), watchdog.Policy{WallClock: longest, IdleWindow: longest, StartupGrace: longest}, true},
		"started near 2262": {time.Unix(0, math.MaxInt64).Add(-time.Second), time.Unix(0, math.MaxInt64).Add(-time.Second), watchdog.Policy{WallClock: time.Hour}, false},
		"longest from 2262": {time.Unix(0, math.MaxInt64).Add(-time.Second), time.Unix(0, math.MaxInt64).Add(-time.Second), watchdog.Policy{WallClock: longest, IdleWindow: longest}, false},
	} {
		t.Run(name, func(t *testing.T) {
			mock := newMock()
			mock.Set(tc.clockAt)
			c := &countingClock{Mock: mock}
			w := watchdog.New(watchdog.WithClock(c))
			defer w.Close(context.Background())
			s, err := w.Start(context.Background(), "s", tc.start, tc.p)
			require.NoError(t, err)
			for range 10 {
				mock.Add(time.Second)
				require.NoError(t, w.Check(context.Background()))
			}
			assert.LessOrEqual(t, c.armed.Load(), int64(2), "timers armed over 10 passes")
			if tc.ends {
				var v *watchdog.VerdictError
				require.ErrorAs(t, context.Cause(s.Context()), &v, "ended by a rule")
			} else {
				require.NoError(t, s.Context().Err())
			}
		})
	}
}
