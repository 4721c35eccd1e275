package record

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// ev is a test event: an id and a lane.
type ev struct{ id, lane string }

// orderStore records the ids it accepts and fails the ids in fail as many
// times as told; ids starting with "bad" are refused for good.
type orderStore struct {
	mu   sync.Mutex
	got  []string
	fail map[string]int
}

var errBad = errors.New("bad event")

func (s *orderStore) append(_ context.Context, e ev) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.HasPrefix(e.id, "bad") {
		return errBad
	}
	if s.fail[e.id] > 0 {
		s.fail[e.id]--
		return errors.New("transient")
	}
	s.got = append(s.got, e.id)
	return nil
}

func (s *orderStore) ids(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, id := range s.got {
		if strings.HasPrefix(id, prefix) {
			out = append(out, id)
		}
	}
	return out
}

// item is a queued test item: one or two events of one lane.
type item struct{ evs []ev }

func newTestRecorder(st *orderStore, mock *clock.Mock) *Recorder[item, ev] {
	return New(Config[item, ev]{
		Append: func(ctx context.Context, evs []ev) error { return st.append(ctx, evs[0]) },
		Expand: func(dst []ev, t *item) []ev { return append(dst, t.evs...) },
		Lane:   func(t *item) string { return t.evs[0].lane },
		Classify: func(err error) Outcome {
			if errors.Is(err, errBad) {
				return Refused
			}
			return Retry
		},
		Name:     func(e *ev) string { return e.id },
		Clock:    mock,
		Log:      zap.NewNop(),
		RetryMin: 100 * time.Millisecond,
		RetryMax: time.Second,
	})
}

func one(id, lane string) item { return item{evs: []ev{{id, lane}}} }

// A drain that recorded a lane's event and then failed the next one in the
// same batch must not clear the lane's backoff: its later events would go
// ahead of the failed one (A3 before A2) with no retry armed for it.
func TestALaneKeepsItsOrderAndBackoffWhenALaterEventOfTheBatchFails(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"A2": 1}}
	r := newTestRecorder(st, mock)
	for i := range batchLen - 2 { // A1 and A2 end the first batch, A3 starts the next
		r.Push(one(fmt.Sprintf("X%d", i), fmt.Sprintf("x%d", i)))
	}
	r.Push(one("A1", "a"), one("A2", "a"), one("A3", "a"))

	r.drain() // the goroutine is not started: drain runs here
	require.Equal(t, []string{"A1"}, st.ids("A"), "A2 failed: A3 waits behind it")
	require.NotNil(t, r.lanes["a"], "lane a backs off after A2 failed")
	require.NotNil(t, r.timer, "a retry is armed")

	mock.Add(time.Hour) // past the backoff
	r.drain()
	require.Equal(t, []string{"A1", "A2", "A3"}, st.ids("A"))
	require.Empty(t, r.lanes)
}

// A lane's failed attempts are kept until one of its events is recorded, so
// the backoff doubles from the min up to the max.
func TestBackoffDoublesAfterEachFailedRetry(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"A1": 3}}
	r := newTestRecorder(st, mock)
	r.Push(one("A1", "a"), one("A2", "a"))

	for k, wait := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		r.drain() // fails A1
		require.Empty(t, st.ids(""))
		require.Equal(t, 2-k, st.fail["A1"], "attempt %d made", k+1)
		require.Equal(t, mock.Now().Add(wait), r.lanes["a"].retryAt, "the next retry is %v away", wait)
		mock.Add(wait - time.Nanosecond)
		r.drain() // still backing off: nothing attempted
		require.Equal(t, 2-k, st.fail["A1"], "no attempt during the backoff")
		mock.Add(time.Nanosecond)
	}
	r.drain() // the fourth attempt succeeds; A2 follows
	require.Equal(t, []string{"A1", "A2"}, st.ids(""))
	require.Empty(t, r.lanes, "recorded: the backoff is over")
}

// An item of several events that is partly recorded keeps its place: only
// its unrecorded events are pending, retried and, at Close, named.
func TestAPartlyRecordedItemRetriesOnlyItsUnrecordedEvents(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"B2": 100}}
	r := newTestRecorder(st, mock)
	r.Push(item{evs: []ev{{"A1", "a"}, {"A2", "a"}}}, item{evs: []ev{{"B1", "b"}, {"B2", "b"}}}, one("B3", "b"), one("C1", "c"))
	r.drain()
	require.Equal(t, []string{"A1", "A2", "B1", "C1"}, st.ids(""))
	require.Equal(t, []ev{{"B2", "b"}, {"B3", "b"}}, r.Pending("b"))
	require.Empty(t, r.Pending("a"))

	go r.Run()
	notRecorded := errors.New("not recorded")
	err := r.Close(context.Background(), notRecorded)
	require.ErrorIs(t, err, notRecorded)
	require.Contains(t, err.Error(), "2 event(s): B2; B3")
	require.Equal(t, []string{"A1", "A2", "B1", "C1"}, st.ids(""))
}

// An event the store refuses for good leaves the queue at once, the lane's
// later events follow, and Close reports the refusal.
func TestARefusedEventIsDroppedAndReportedByClose(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{}
	r := newTestRecorder(st, mock)
	r.Push(one("bad1", "a"), one("A2", "a"))
	go r.Run()
	require.NoError(t, r.Barrier(context.Background()))
	require.Equal(t, []string{"A2"}, st.ids(""))
	err := r.Close(context.Background(), errors.New("not recorded"))
	require.ErrorIs(t, err, errBad)
	require.Contains(t, err.Error(), "bad1")
}

// A queue that is drained between bursts reuses its storage: pushing and
// removing a chunk's worth of items allocates nothing.
func TestADrainedQueueReusesItsStorage(t *testing.T) {
	var q queue[int]
	allocs := testing.AllocsPerRun(100, func() {
		for i := range chunkLen {
			q.push(i)
		}
		for range chunkLen {
			q.remove(q.head)
		}
		q.compact()
	})
	require.Zero(t, allocs)
}

func TestPairFormatsTwoIDsLikeString(t *testing.T) {
	x := IDs{Prefix: "wd-"}
	a, b := x.Pair(7, 12345678901234567890)
	require.Equal(t, x.String(7), a)
	require.Equal(t, x.String(12345678901234567890), b)
}

// Ids are the prefix followed by a sequence number from 1, whatever the
// prefix's length, and unique under concurrent use.
func TestIDsArePrefixAndSequenceAndUniqueUnderConcurrentUse(t *testing.T) {
	long := strings.Repeat("p", 300) + "-"
	for _, prefix := range []string{"wd-", long} {
		x := IDs{Prefix: prefix}
		for want := uint64(1); want <= 100; want++ {
			require.Equal(t, fmt.Sprintf("%s%d", prefix, want), x.String(x.Next()))
		}
	}
	var x IDs
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				n := x.Next()
				mu.Lock()
				require.False(t, seen[n], "id %d handed out twice", n)
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	testwait.Group(t, &wg, "the goroutines taking ids")
	require.Len(t, seen, 8000)
}

// While the queue is full, a lane's coalescible items fold into its latest,
// which keeps the place of the first; any other item of the lane closes the
// slot so the lane's order holds, and a slot the drain has taken is never
// written again.
func TestAFullQueueFoldsALanesRepeatedItemsIntoItsLatestKeepingTheOrder(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"X": 1}}
	r := newTestRecorder(st, mock)
	r.c.Coalesce = func(t *item) bool { return strings.HasPrefix(t.evs[0].id, "c") }
	r.c.CoalesceAt = 2
	r.Push(one("X", "x"), one("Y", "x")) // lane x backs off after X fails: the queue stays full
	r.drain()
	require.Equal(t, 2, r.Len())

	r.Push(one("c1", "a"), one("c2", "a"), one("c3", "a")) // folded: one slot for c3
	r.Push(one("D", "a"))                                  // closes the slot
	r.Push(one("c4", "a"), one("c5", "a"))                 // a new slot, after D
	r.Push(one("c6", "b"))                                 // another lane
	require.Equal(t, []ev{{"c3", "a"}, {"D", "a"}, {"c5", "a"}}, r.Pending("a"))
	require.Equal(t, int64(3), r.Coalesced())

	r.drain() // records lane a's and b's slots: they are closed
	require.Equal(t, []string{"c3", "D", "c5", "c6"}, st.ids(""))
	r.Push(one("c7", "a"))
	require.Equal(t, []ev{{"c7", "a"}}, r.Pending("a"), "a recorded slot is never written again")

	mock.Add(time.Hour)
	r.drain()
	require.Equal(t, []string{"c3", "D", "c5", "c6", "X", "Y", "c7"}, st.ids(""))
	require.Equal(t, int64(3), r.Coalesced())
}

// Below the bound nothing is folded.
func TestAQueueBelowItsBoundFoldsNothing(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{}
	r := newTestRecorder(st, mock)
	r.c.Coalesce = func(*item) bool { return true }
	r.c.CoalesceAt = 10
	r.Push(one("c1", "a"), one("c2", "a"), one("c3", "a"))
	r.drain()
	require.Equal(t, []string{"c1", "c2", "c3"}, st.ids(""))
	require.Zero(t, r.Coalesced())
}

// An open slot whose Append fails stays open, and one recorded while a
// later item was folded into it stays queued for that item: nothing folded
// is lost and the lane writes one record per drain at most.
func TestAnOpenSlotKeepsTheItemsFoldedWhileItWasBeingAppended(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"X": 1, "c1": 1}}
	r := newTestRecorder(st, mock)
	r.c.Coalesce = func(t *item) bool { return strings.HasPrefix(t.evs[0].id, "c") }
	r.c.CoalesceAt = 1
	r.Push(one("X", "x")) // keeps the queue full
	r.drain()
	r.Push(one("c1", "a"))
	r.drain() // c1 fails: its slot stays open
	r.Push(one("c2", "a"))
	require.Equal(t, []ev{{"c2", "a"}}, r.Pending("a"))
	require.Equal(t, 2, r.Len())

	inner := r.c.Append
	r.c.Append = func(ctx context.Context, evs []ev) error {
		if evs[0].id == "c2" {
			r.Push(one("c3", "a")) // folded while c2 is being appended
		}
		return inner(ctx, evs)
	}
	mock.Add(time.Hour)
	r.drain()
	require.Equal(t, []string{"X", "c2"}, st.ids(""))
	require.Equal(t, []ev{{"c3", "a"}}, r.Pending("a"), "c3 is still queued")
	r.drain()
	require.Equal(t, []string{"X", "c2", "c3"}, st.ids(""))
	require.Zero(t, r.Len())
	require.Equal(t, int64(2), r.Coalesced())
}

// Pending reads a lane's queued events from the lane's own chain: it stays
// exact while other lanes' items are recorded around a lane that backs off,
// and the index forgets the lanes whose items are all recorded.
func TestPendingStaysExactWhileOtherLanesDrainAroundABackingOffLane(t *testing.T) {
	mock := clock.NewMock()
	st := &orderStore{fail: map[string]int{"A1": 1}}
	r := newTestRecorder(st, mock)
	r.Push(one("A1", "a"))
	for i := range 3000 {
		r.Push(one(fmt.Sprint("X", i), fmt.Sprint("x", i)))
	}
	r.Push(one("A2", "a"), one("B1", "b"))
	require.Equal(t, []ev{{"X7", "x7"}}, r.Pending("x7"))

	r.drain()
	require.Equal(t, []ev{{"A1", "a"}, {"A2", "a"}}, r.Pending("a"), "A1 failed: a's events wait, in order")
	require.Empty(t, r.Pending("x7"))
	require.Empty(t, r.Pending("b"))
	require.Equal(t, 2, r.Len())
	require.LessOrEqual(t, len(r.chains), 2*r.chained+1024, "emptied lanes are forgotten")

	mock.Add(time.Hour)
	r.drain()
	require.Empty(t, r.Pending("a"))
	require.Equal(t, 0, r.Len())
}

// Pending scans a short queue and indexes a long one (indexAt): both read
// the same events, in order, also for items pushed after the index was
// built, and once the queue is empty no push pays for an index until
// Pending asks again.
func TestPendingReadsTheSameWithAndWithoutItsIndex(t *testing.T) {
	for _, backlog := range []int{10, indexAt + 10} {
		t.Run(fmt.Sprint(backlog), func(t *testing.T) {
			mock := clock.NewMock()
			st := &orderStore{fail: map[string]int{"A1": 1}}
			r := newTestRecorder(st, mock)
			r.Push(one("A1", "a"))
			for i := range backlog {
				r.Push(one(fmt.Sprint("X", i), fmt.Sprint("x", i%7)))
			}
			require.Equal(t, []ev{{"A1", "a"}}, r.Pending("a"))
			require.Equal(t, backlog >= indexAt, r.chains != nil, "indexed only for a backlog")
			r.Push(one("A2", "a"))
			require.Equal(t, []ev{{"A1", "a"}, {"A2", "a"}}, r.Pending("a"))
			require.Len(t, r.Pending("x3"), (backlog+3)/7)

			r.drain() // A1 fails: a backs off, the rest is recorded
			require.Equal(t, []ev{{"A1", "a"}, {"A2", "a"}}, r.Pending("a"))
			require.Empty(t, r.Pending("x3"))
			mock.Add(time.Hour)
			r.drain()
			require.Zero(t, r.Len())
			require.Nil(t, r.chains, "no index once the queue is empty")
			r.Push(one("A3", "a"))
			require.Nil(t, r.chains, "a push pays no index")
			require.Equal(t, []ev{{"A3", "a"}}, r.Pending("a"))
		})
	}
}
