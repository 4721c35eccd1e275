package watchdog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
)

// A window opened by an owner whose clock is 30 s ahead of the store's (or
// behind it), or adopted by a member whose clock is, is decided at the same
// instant and with the same elapsed time as with clocks that agree, and the
// log reads the same: every member reads the store's clock at its
// heartbeats and records on it. The store's clock is the bubble's time; a
// member's clock is the real clock, its wall time set off by the test hook
// (as the system clock of another host would be). The owner hands the
// window over at once (Close); each case runs in a bubble of its own, from
// the same instant.
func TestASkewedMemberDecidesAnAdoptedWindowAsAnUnskewedOne(t *testing.T) {
	type outcome struct {
		start, fired time.Duration // recorded, from t0
		recorded     time.Duration // when the store recorded the cancel, from t0
		elapsed      float64
		kinds        []string
	}
	run := func(t *testing.T, ownerSkew, memberSkew time.Duration) (o outcome) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			store := newLeaseStore()
			owner := watchdog.New(watchdog.WithStore(store))
			member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
			watchdog.StepWallClock(owner, ownerSkew)
			watchdog.StepWallClock(member, memberSkew)
			time.Sleep(3 * time.Second) // heartbeats read the store's clock
			synctest.Wait()
			t0 := time.Now()
			_, err := owner.Start(ctx, "agent", t0.Add(ownerSkew), // now, on the owner's clock
				watchdog.Policy{WallClock: 20 * time.Second, ContinueWhenOwnerLost: true})
			require.NoError(t, err)
			require.NoError(t, owner.Close(ctx)) // handed over
			time.Sleep(time.Minute)
			synctest.Wait()
			evs := load(t, store.MemoryStore, "agent")
			o.kinds = kinds(evs)
			require.Len(t, evs, 4, "%v", o.kinds)
			o.start, o.fired, o.elapsed = evs[0].WindowStartedAt.Sub(t0), evs[3].OccurredAt.Sub(t0), evs[3].ElapsedSeconds
			store.lmu.Lock()
			o.recorded = store.at[evs[3].ID].Sub(t0)
			store.lmu.Unlock()
			assert.True(t, evs[0].WindowStartedAt.Equal(evs[3].WindowStartedAt), "the adopter keeps the recorded start")
			mm, err := watchdog.Replay(evs)
			require.NoError(t, err)
			assert.Empty(t, mm)
			require.NoError(t, member.Close(ctx))
		})
		return o
	}
	want := run(t, 0, 0)
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, want.kinds)
	assert.Equal(t, time.Duration(0), want.start)
	assert.Equal(t, 20*time.Second+time.Nanosecond, want.fired, "fired at the window's deadline")
	assert.Equal(t, want.fired, want.recorded, "and recorded then")
	for _, c := range []struct{ owner, member time.Duration }{
		{0, 30 * time.Second}, {0, -30 * time.Second}, {30 * time.Second, 0}, {-30 * time.Second, 30 * time.Second},
	} {
		t.Run(fmt.Sprintf("owner %v member %v", c.owner, c.member), func(t *testing.T) {
			got := run(t, c.owner, c.member)
			assert.Equal(t, want, got, "the same decision as with clocks that agree")
		})
	}
}

// pausableClock is the real clock (a synctest bubble's time) of a process
// that SIGSTOP can pause: while paused it reads the instant of the pause and
// runs no timer; on SIGCONT it reads the time again, which jumped by the
// pause, and runs at once every timer that came due meanwhile.
type pausableClock struct {
	clock.Clock
	mu       sync.Mutex
	pausedAt time.Time
	due      []func()
}

func (c *pausableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pausedAt.IsZero() {
		return c.pausedAt
	}
	return c.Clock.Now()
}

func (c *pausableClock) AfterFunc(d time.Duration, f func()) *clock.Timer {
	return c.Clock.AfterFunc(d, func() {
		c.mu.Lock()
		if !c.pausedAt.IsZero() {
			c.due = append(c.due, f)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		f()
	})
}

func (c *pausableClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pausedAt = c.Clock.Now()
}

func (c *pausableClock) cont() {
	c.mu.Lock()
	due := c.due
	c.pausedAt, c.due = time.Time{}, nil
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// An owner paused past its lease (SIGSTOP, then SIGCONT: its clock jumps
// and its timers fire at once) while a member adopted its windows learns it
// at once on resuming: before it decides anything, it renews its lease and
// asks the store which windows it still holds, and ends the others, their
// context's cause naming owner_lost, counted in Stats.Disowned and logged at
// warn level. A window nobody adopted meanwhile stays its own.
func TestAPausedOwnerEndsTheSessionsItLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := newLeaseStore()
		store.keep = map[string]bool{"kept": true}
		core, logs := observer.New(zapcore.WarnLevel)
		pc := &pausableClock{Clock: clock.New()}
		owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(pc), watchdog.WithLogger(zap.New(core)))
		var lost []*watchdog.Session
		for i, p := range []watchdog.Policy{
			{WallClock: time.Hour},
			{WallClock: time.Hour, ContinueWhenOwnerLost: true},
			{WallClock: 10 * time.Second}, // due during the pause: lost all the same, not decided
		} {
			s, err := owner.Start(ctx, fmt.Sprint("agent-", i), pc.Now(), p)
			require.NoError(t, err)
			lost = append(lost, s)
		}
		kept, err := owner.Start(ctx, "kept", pc.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)

		time.Sleep(3 * time.Second) // a live owner: heartbeats
		synctest.Wait()

		// The owner is paused; a member adopts its windows.
		pc.stop()
		member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(watchdog.DefaultLeaseTTL + 10*time.Second)
		synctest.Wait()
		require.Equal(t, int64(3), member.Stats().Adopted)

		// It resumes: nothing else runs until it knows.
		pc.cont()
		require.NoError(t, owner.Check(ctx))
		for i, s := range lost {
			require.Error(t, s.Context().Err(), "agent-%d ended", i)
			cause := context.Cause(s.Context())
			require.ErrorIs(t, cause, watchdog.ErrAlreadyWatched)
			assert.Contains(t, cause.Error(), watchdog.StopOwnerLost, "agent-%d: not a verdict of its own", i)
		}
		require.NoError(t, kept.Context().Err(), "the window nobody adopted is still the owner's")
		assert.Equal(t, int64(3), owner.Stats().Disowned)
		assert.Equal(t, 1, owner.Stats().Sessions)
		var warned []string
		for _, e := range logs.FilterMessageSnippet("lease lapsed").All() {
			warned = append(warned, e.ContextMap()["session_id"].(string))
			assert.Equal(t, zapcore.WarnLevel, e.Level)
			assert.Contains(t, e.Message, "another owner took the window over")
		}
		assert.ElementsMatch(t, []string{"agent-0", "agent-1", "agent-2"}, warned, "one warning per window lost: %v", logs.All())
		require.NoError(t, owner.Close(ctx))
		require.NoError(t, member.Close(ctx))
	})
}

// hangingLeaseStore is a leaseStore whose Heartbeat, once hang is closed,
// blocks, ignoring its context, until release is closed.
type hangingLeaseStore struct {
	*leaseStore
	hang, release chan struct{}
}

func (h *hangingLeaseStore) Heartbeat(ctx context.Context, owner string, ttl time.Duration, cps []watchdog.Checkpoint) error {
	select {
	case <-h.hang:
		<-h.release
	default:
	}
	return h.leaseStore.Heartbeat(ctx, owner, ttl, cps)
}

// A store whose Heartbeat hangs, ignoring its context, never holds the
// scheduler up: the pass that finds no heartbeat ended for over a lease
// does not wait for one that has hung longer than its bound, so a verdict
// due meanwhile fires at its exact instant.
func TestAHungHeartbeatNeverDelaysAVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &hangingLeaseStore{leaseStore: newLeaseStore(), hang: make(chan struct{}), release: make(chan struct{})}
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		s, err := w.Start(ctx, "s", start, watchdog.Policy{WallClock: 20 * time.Second})
		require.NoError(t, err)
		time.Sleep(time.Second)
		close(store.hang) // the next heartbeat, at 2 s, hangs
		<-s.Context().Done()
		assert.Equal(t, 20*time.Second+time.Nanosecond, time.Since(start), "the verdict fired at its instant")
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
		close(store.release)
		require.NoError(t, w.Close(ctx))
	})
}
