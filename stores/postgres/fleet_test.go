package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// The fleet tests pause an owner the way SIGSTOP or a long GC pause would:
// its Watchdog runs on a mock clock that the test does not advance, so it
// sends its first heartbeat and then none, and its lease (300 ms, on the
// database's clock) expires. Another Watchdog, with adoption, takes its
// windows over. The tests wait on a follower of the session, never on time.

const testLease = 300 * time.Millisecond

// paused returns a Watchdog on its own mock clock (set to now), on its own
// Store of table, with a 300 ms lease. Its first heartbeat fails, as one
// that times out under load does (see startPaused).
func paused(t *testing.T, table string) (*watchdog.Watchdog, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(time.Now())
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithLease(testLease),
		watchdog.WithStore(&firstHeartbeatFails{Store: newStore(t, testPool(t), WithTable(table))}))
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w, mock
}

// firstHeartbeatFails is a Store whose first Heartbeat fails.
type firstHeartbeatFails struct {
	*Store
	failed atomic.Bool
}

func (f *firstHeartbeatFails) Heartbeat(ctx context.Context, owner string, ttl time.Duration, cps []watchdog.Checkpoint) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("test: the first heartbeat timed out")
	}
	return f.Store.Heartbeat(ctx, owner, ttl, cps)
}

// startPaused starts session id on owner, a paused Watchdog (see paused),
// and returns it. Start waits for the owner's first lease, and its first
// heartbeat fails: the retry comes a third of a lease later on the owner's
// clock, which the test moves by that much every 20 ms until Start returns
// (the owner pauses after). It fails the test if Start has not returned
// within testwait.Bound.
func startPaused(t *testing.T, owner *watchdog.Watchdog, mock *clock.Mock, id string, p watchdog.Policy) *watchdog.Session {
	t.Helper()
	type started struct {
		s   *watchdog.Session
		err error
	}
	res := make(chan started, 1)
	begin := mock.Now()
	go func() {
		s, err := owner.Start(context.Background(), id, begin, p)
		res <- started{s, err}
	}()
	tick := time.NewTicker(20 * time.Millisecond) // the owner's clock runs while it starts
	defer tick.Stop()
	bound := time.After(testwait.Bound)
	for {
		select {
		case r := <-res:
			require.NoError(t, r.err)
			return r.s
		case <-tick.C:
			mock.Add(testLease / 3)
		case <-bound:
			t.Fatalf("waited %v for the paused owner's Start: its heartbeats took no lease", testwait.Bound)
		}
	}
}

// adopter returns a Watchdog on the real clock that adopts orphans.
func adopter(t *testing.T, table string) *watchdog.Watchdog {
	t.Helper()
	w := watchdog.New(watchdog.WithAdoption(), watchdog.WithLease(testLease),
		watchdog.WithStore(newStore(t, testPool(t), WithTable(table))))
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// With the default policy, the adopter of a lost owner's window ends it at
// once (stop, reason owner_lost), recording who the owner was and when it
// was last seen; the follower of the session ends. The owner, when it
// wakes up past the window's budget, learns before deciding anything that
// it lost the window (owner_lost), records nothing for it and stops
// watching the session.
func TestAnAdopterEndsTheWindowOfALostOwner(t *testing.T) {
	ctx := context.Background()
	table := uniqueTable(t)
	store := newStore(t, testPool(t), WithTable(table))
	owner, mock := paused(t, table)
	s := startPaused(t, owner, mock, "agent", watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, owner.Check(ctx))
	follow, stop, err := watchdog.Follow(ctx, store, "agent")
	require.NoError(t, err)
	defer stop()

	ad := adopter(t, table)
	testwait.For(t, follow.Done(), "the follower to see the adopter end the window")
	require.ErrorIs(t, context.Cause(follow), watchdog.ErrSessionStopped)
	evs, err := store.Load(ctx, "agent")
	require.NoError(t, err)
	require.Len(t, evs, 3)
	start, resume, end := evs[0], evs[1], evs[2]
	assert.Equal(t, watchdog.KindStart, start.Kind)
	assert.Equal(t, watchdog.KindResume, resume.Kind)
	assert.Equal(t, start.Owner, resume.AdoptedFrom, "adopted from the owner that opened the window")
	assert.NotEqual(t, start.Owner, resume.Owner)
	assert.Equal(t, watchdog.StopOwnerLost, resume.Reason)
	assert.False(t, resume.OwnerLastSeen.IsZero(), "when the owner was last seen")
	assert.Equal(t, 1, resume.Window)
	assert.Equal(t, watchdog.KindStop, end.Kind)
	assert.Equal(t, watchdog.StopOwnerLost, end.Reason)
	assert.Equal(t, resume.Owner, end.Owner)
	assert.Equal(t, int64(1), ad.Stats().Adopted)

	// The owner wakes up past its budget: it renews its lease, learns that
	// it lost the window, and decides nothing of it.
	require.NoError(t, watchdogtest.Advance(ctx, mock, time.Hour+time.Nanosecond, owner))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrAlreadyWatched)
	assert.Contains(t, context.Cause(s.Context()).Error(), watchdog.StopOwnerLost)
	assert.Equal(t, int64(1), owner.Stats().Disowned)
	require.NoError(t, owner.Check(ctx))
	after, err := store.Load(ctx, "agent")
	require.NoError(t, err)
	assert.Len(t, after, 3, "nothing recorded by the owner that lost the window")
}

// With ContinueWhenOwnerLost, the adopter keeps watching the window under
// the recorded policy, from the recorded instants: the wall clock fires at
// the deadline the lost owner would have fired at, measured from the
// window's recorded start, and the follower ends with that verdict.
func TestAnAdopterContinuesAWindowUnderItsRecordedPolicy(t *testing.T) {
	ctx := context.Background()
	table := uniqueTable(t)
	store := newStore(t, testPool(t), WithTable(table))
	owner, mock := paused(t, table)
	begin := mock.Now()
	startPaused(t, owner, mock, "agent", watchdog.Policy{WallClock: 2 * time.Second, ContinueWhenOwnerLost: true})
	require.NoError(t, owner.Check(ctx))
	follow, stop, err := watchdog.Follow(ctx, store, "agent")
	require.NoError(t, err)
	defer stop()

	adopter(t, table)
	testwait.For(t, follow.Done(), "the follower to see the adopter's verdict")
	require.ErrorIs(t, context.Cause(follow), watchdog.ErrWallClockExceeded)
	evs, err := store.Load(ctx, "agent")
	require.NoError(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds)
	cancel := evs[3]
	assert.Equal(t, evs[1].Owner, cancel.Owner, "decided by the adopter")
	assert.Equal(t, evs[0].Owner, evs[1].AdoptedFrom)
	assert.Equal(t, begin.UTC(), cancel.WindowStartedAt.UTC(), "the window's recorded start")
	assert.InDelta(t, 2.0, cancel.ElapsedSeconds, 0.5, "fired at the original deadline, not 2 s after the adoption")
	require.NotNil(t, evs[1].Policy)
	assert.True(t, evs[1].Policy.ContinueWhenOwnerLost, "under the recorded policy")
}

// A heartbeat keeps the checkpoints of the windows its owner holds (and
// only those); Adopt hands the last one over with the window.
func TestHeartbeatCheckpointsReachTheAdopter(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, testPool(t), WithTable(uniqueTable(t)))
	open := ev("open", "agent", watchdog.KindStart, 1)
	open.OpensWindow, open.Owner = true, "a"
	require.NoError(t, s.Append(ctx, open))
	last := time.Date(2026, 11, 25, 9, 0, 0, 123456789, time.UTC)
	cp := []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &last, Counter: 7}, {Channel: "mcp_tool", Counter: 0}}
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, []watchdog.Checkpoint{
		{SessionID: "agent", Window: 1, Evidence: cp},
		{SessionID: "not-mine", Window: 1, Evidence: cp},
	}))
	orphans, err := s.Adopt(ctx, "b", 10)
	require.NoError(t, err)
	require.Empty(t, orphans, "a's lease lives")
	require.NoError(t, s.Release(ctx, "a"))
	orphans, err = s.Adopt(ctx, "b", 10)
	require.NoError(t, err)
	require.Len(t, orphans, 1)
	o := orphans[0]
	assert.Equal(t, "agent", o.SessionID)
	assert.Equal(t, "a", o.Owner)
	require.Len(t, o.Evidence, 2)
	assert.True(t, o.Evidence[0].LastAt.Equal(last))
	assert.Equal(t, uint64(7), o.Evidence[0].Counter)
	assert.Nil(t, o.Evidence[1].LastAt)
	again, err := s.Adopt(ctx, "c", 10)
	require.NoError(t, err)
	assert.Empty(t, again, "adopted once")
}

// A remote worker's checkpoint (watchdog.RecordCheckpoint, no owner) is
// accepted for a window another owner holds (it is no write of an owner,
// so the fence lets it through), and the adopter's Load sees it.
func TestARemoteWorkersCheckpointPassesTheFence(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, testPool(t), WithTable(uniqueTable(t)))
	open := ev("open", "agent", watchdog.KindStart, 1)
	open.OpensWindow, open.Owner = true, "a"
	require.NoError(t, s.Append(ctx, open))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, nil))
	last := time.Now().UTC()
	require.NoError(t, watchdog.RecordCheckpoint(ctx, s, watchdog.Checkpoint{
		SessionID: "agent", Evidence: []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &last, Counter: 3}}}))
	evs, err := s.Load(ctx, "agent")
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, watchdog.KindCheckpoint, evs[1].Kind)
	assert.Empty(t, evs[1].Owner)
	assert.True(t, evs[1].EvidenceSummary[0].LastAt.Equal(last))
}

// Now reads the database's clock; Held returns the open windows an owner
// holds, and none it lost to an adopter or that ended.
func TestTheStoreTellsItsClockAndTheWindowsAnOwnerHolds(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, testPool(t), WithTable(uniqueTable(t)))
	before := time.Now()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	assert.WithinDuration(t, before, now, time.Minute, "the test server runs on this host's clock")
	for i, id := range []string{"kept", "lost", "ended"} {
		open := ev("open-"+id, id, watchdog.KindStart, 1)
		open.OpensWindow, open.Owner = true, "a"
		require.NoError(t, s.Append(ctx, open), "%d", i)
	}
	end := ev("end", "ended", watchdog.KindStop, 1)
	end.Owner = "a"
	require.NoError(t, s.Append(ctx, end))
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, nil))
	held, err := s.Held(ctx, "a")
	require.NoError(t, err)
	assert.ElementsMatch(t, []watchdog.Checkpoint{{SessionID: "kept", Window: 1}, {SessionID: "lost", Window: 1}}, held)

	require.NoError(t, s.Release(ctx, "a"))
	require.NoError(t, s.Heartbeat(ctx, "b", time.Minute, nil))
	resume := ev("take", "lost", watchdog.KindResume, 1)
	resume.Owner = "b"
	require.NoError(t, s.Append(ctx, resume), "b takes the window over")
	require.NoError(t, s.Heartbeat(ctx, "a", time.Minute, nil))
	held, err = s.Held(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []watchdog.Checkpoint{{SessionID: "kept", Window: 1}}, held)
}
