package watchdog_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// leaseStore is a store shared by a fleet, in memory, that keeps leases
// and window owners the way the PostgreSQL store does: openings are
// arbitrated, leases expire on the store's clock (time.Now, a synctest
// bubble's fake time), an event of a window another owner holds is refused
// (a resume takes the window over once that owner's lease is gone; a
// closed window stays its last owner's), and
// Adopt hands the windows of expired owners over.
type leaseStore struct {
	*arbStore
	lmu      sync.Mutex
	leases   map[string]time.Time // owner -> expiry
	lastSeen map[string]time.Time
	owners   map[string]string                   // "id/window" -> the window's owner
	ended    map[string]bool                     // "id/window" -> it has a terminal event
	evidence map[string][]watchdog.EvidenceEntry // "id/window" -> its last checkpoint
	failLoad int                                 // Loads to fail
	gate     chan struct{}                       // if set, a fenced Append returns once it is closed
	keep     map[string]bool                     // sessions Adopt never hands over
	at       map[string]time.Time                // event id -> when it was recorded, on the store's clock
}

func newLeaseStore() *leaseStore {
	return &leaseStore{arbStore: newArbStore(), leases: map[string]time.Time{}, lastSeen: map[string]time.Time{}, owners: map[string]string{}, ended: map[string]bool{},
		evidence: map[string][]watchdog.EvidenceEntry{}, at: map[string]time.Time{}}
}

func (l *leaseStore) Heartbeat(_ context.Context, owner string, ttl time.Duration, cps []watchdog.Checkpoint) error {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	l.leases[owner], l.lastSeen[owner] = time.Now().Add(ttl), time.Now()
	for _, c := range cps {
		if k := fmt.Sprint(c.SessionID, "/", c.Window); l.owners[k] == owner {
			l.evidence[k] = c.Evidence
		}
	}
	return nil
}

func (l *leaseStore) Release(_ context.Context, owner string) error {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	l.leases[owner] = time.Now()
	return nil
}

func (l *leaseStore) alive(owner string) bool { return time.Now().Before(l.leases[owner]) }

func (l *leaseStore) Adopt(_ context.Context, adopter string, limit int) ([]watchdog.Orphan, error) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	var out []watchdog.Orphan
	for k, owner := range l.owners {
		i := strings.LastIndexByte(k, '/')
		id := k[:i]
		if owner == adopter || l.ended[k] || l.alive(owner) || len(out) == limit || l.keep[id] {
			continue
		}
		w, _ := strconv.Atoi(k[i+1:])
		l.owners[k] = adopter
		out = append(out, watchdog.Orphan{SessionID: id, Window: w, Owner: owner, LastSeen: l.lastSeen[owner], Evidence: l.evidence[k]})
	}
	return out, nil
}

// Now is the store's clock, which leases expire on (see Leaser).
func (l *leaseStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }

// Held returns the open windows owner holds (see Leaser).
func (l *leaseStore) Held(_ context.Context, owner string) ([]watchdog.Checkpoint, error) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	var out []watchdog.Checkpoint
	for k, o := range l.owners {
		if o == owner && !l.ended[k] {
			i := strings.LastIndexByte(k, '/')
			w, _ := strconv.Atoi(k[i+1:])
			out = append(out, watchdog.Checkpoint{SessionID: k[:i], Window: w})
		}
	}
	return out, nil
}

func (l *leaseStore) Append(ctx context.Context, evs ...watchdog.Event) error {
	l.lmu.Lock()
	for _, e := range evs {
		k := fmt.Sprint(e.AggregateID, "/", e.Window)
		cur, held := l.owners[k]
		if e.Owner == "" || !held || cur == e.Owner {
			continue
		}
		if e.Kind == watchdog.KindResume && !e.OpensWindow && !l.alive(cur) {
			continue
		}
		gate := l.gate
		l.lmu.Unlock()
		if gate != nil { // judged now, answered later
			<-gate
		}
		return fmt.Errorf("%w: session %s window %d is owned by %s", watchdog.ErrAlreadyWatched, e.AggregateID, e.Window, cur)
	}
	l.lmu.Unlock()
	if err := l.arbStore.Append(ctx, evs...); err != nil {
		return err
	}
	l.lmu.Lock()
	defer l.lmu.Unlock()
	for _, e := range evs {
		k := fmt.Sprint(e.AggregateID, "/", e.Window)
		l.at[e.ID] = time.Now()
		switch {
		case e.Owner == "":
		case e.Terminal():
			l.ended[k] = true // still fenced: the owner of a closed window
		case e.Kind == watchdog.KindStart || e.Kind == watchdog.KindResume:
			l.owners[k] = e.Owner
		}
	}
	return nil
}

func (l *leaseStore) Load(ctx context.Context, id string) ([]watchdog.Event, error) {
	l.lmu.Lock()
	fail := l.failLoad > 0
	l.failLoad--
	l.lmu.Unlock()
	if fail {
		return nil, errStoreDown
	}
	return l.arbStore.Load(ctx, id)
}

// A member adopts the window of an owner that stopped heartbeating (its
// frozen clock stands for SIGSTOP) one lease after its last heartbeat, and
// ends it (owner_lost); the owner, when it wakes up and decides, records
// nothing for the window it lost.
func TestAPausedOwnersWindowIsAdoptedAndItsLaterWritesAreFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		frozen := clock.NewMock()
		frozen.Set(time.Now())
		owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
		s, err := owner.Start(context.Background(), "agent", frozen.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		paused := time.Now()
		member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(watchdog.DefaultLeaseTTL + time.Second) // the lease expires; a sweep runs every second
		synctest.Wait()
		evs := load(t, store.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindStop}, kinds(evs))
		assert.Equal(t, evs[0].Owner, evs[1].AdoptedFrom)
		assert.True(t, paused.Equal(evs[1].OwnerLastSeen), "the owner's last heartbeat: %v", evs[1].OwnerLastSeen)
		assert.Equal(t, watchdog.StopOwnerLost, evs[2].Reason)
		assert.Equal(t, int64(1), member.Stats().Adopted)

		frozen.Add(time.Hour + time.Nanosecond) // the owner wakes up and decides
		require.NoError(t, owner.Check(context.Background()))
		<-s.Context().Done()
		assert.Len(t, load(t, store.MemoryStore, "agent"), 3, "its decision and cancel are fenced")
		require.NoError(t, owner.Close(context.Background()))
		require.NoError(t, member.Close(context.Background()))
	})
}

// A fenced record of a session still running (here a stale observation of
// the idle rule) makes the Watchdog stop watching it: its context ends with
// ErrAlreadyWatched, and Stats counts it.
func TestAFencedOwnerStopsWatchingTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		owner, member, s := fencedSession(t, func(*watchdog.Session) {})
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrAlreadyWatched)
		assert.Equal(t, int64(1), owner.Stats().Disowned)
		assert.Zero(t, owner.Stats().Sessions)
		require.NoError(t, owner.Close(context.Background()))
		require.NoError(t, member.Close(context.Background()))
	})
}

// A window whose adoption failed here (the store's Load failed) is the
// adopter's in the store: it is retried at the next sweep, not left
// unwatched.
func TestAWindowWhoseLocalAdoptionFailedIsRetriedAtTheNextSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		frozen := clock.NewMock()
		frozen.Set(time.Now())
		owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
		_, err := owner.Start(context.Background(), "agent", frozen.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		store.lmu.Lock()
		store.failLoad = 1
		store.lmu.Unlock()
		member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(watchdog.DefaultLeaseTTL + 2*time.Second)
		synctest.Wait()
		assert.Equal(t, int64(1), member.Stats().Adopted)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindStop}, kinds(load(t, store.MemoryStore, "agent")))
		require.NoError(t, owner.Close(context.Background()))
		require.NoError(t, member.Close(context.Background()))
	})
}

// An owner that heartbeats keeps its windows, however long they run: no
// member adopts them, and a resume by another Watchdog is refused.
func TestNoAdoptionWhileTheOwnerHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		owner := watchdog.New(watchdog.WithStore(store))
		_, err := owner.Start(context.Background(), "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		assert.Zero(t, member.Stats().Adopted)
		assert.Positive(t, owner.Stats().LeaseRenewals)
		_, err = member.Resume(context.Background(), "agent", watchdog.Policy{})
		require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
		require.NoError(t, owner.Close(context.Background()))
		require.NoError(t, member.Close(context.Background()))
	})
}

// The owner's heartbeats checkpoint the evidence of the windows it holds;
// an adopter that continues a window seeds the evidence rules from the last
// checkpoint: the idle rule fires 30 s after the agent's last output, not
// 30 s after the adoption, and the adoption's record carries the evidence
// it continued from. Without a checkpoint the record says the rules start
// again at the adoption (observed_since).
func TestAnAdopterContinuesTheIdleRuleFromTheOwnersLastCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		owner := clock.NewMock()
		owner.Set(time.Now())
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(owner))
		t0 := time.Now()
		s, err := w1.Start(context.Background(), "agent", t0,
			watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1, ContinueWhenOwnerLost: true})
		require.NoError(t, err)
		touched := owner.Now()          // the owner's (frozen) clock: the instant of the evidence
		s.Touch(watchdog.ChannelStdout) // the agent's last output
		time.Sleep(2 * time.Second)     // the owner's clock keeps pace for one heartbeat, which checkpoints it
		owner.Add(2 * time.Second)
		synctest.Wait()
		lastBeat := time.Now()
		// From here the owner is paused.
		w2 := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(time.Minute)
		synctest.Wait()
		evs := load(t, store.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		adoption, decision := evs[1], evs[2]
		assert.False(t, adoption.OccurredAt.Before(lastBeat.Add(watchdog.DefaultLeaseTTL)), "adopted once the lease expired")
		require.NotEmpty(t, adoption.EvidenceSummary, "the adoption records the checkpoint it continues from")
		assert.True(t, adoption.EvidenceSummary[0].LastAt.Equal(touched), "stdout's last output, from the checkpoint: %v", adoption.EvidenceSummary[0].LastAt)
		assert.True(t, adoption.ObservedSince.IsZero())
		assert.Equal(t, "idle", decision.Rule)
		assert.InDelta(t, 30.0, decision.OccurredAt.Sub(touched).Seconds(), 0.2, "30 s after the last output, not after the adoption")
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mm, "replay re-derives the adopter's verdict")
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))

		// The same without a heartbeat after the output: no checkpoint of
		// it, so the rules start again at the adoption, and the record
		// says so.
		store2 := newLeaseStore()
		owner2 := clock.NewMock()
		owner2.Set(time.Now())
		w3 := watchdog.New(watchdog.WithStore(store2), watchdog.WithClock(owner2))
		t1 := time.Now()
		s2, err := w3.Start(context.Background(), "agent", t1,
			watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1, ContinueWhenOwnerLost: true})
		require.NoError(t, err)
		s2.Touch(watchdog.ChannelStdout) // after the first heartbeat: never checkpointed
		w4 := watchdog.New(watchdog.WithStore(store2), watchdog.WithAdoption())
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		evs = load(t, store2.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		assert.Empty(t, evs[1].EvidenceSummary)
		assert.True(t, evs[1].ObservedSince.Equal(evs[1].OccurredAt), "the rules start again at the adoption")
		assert.InDelta(t, 30.0, evs[2].OccurredAt.Sub(evs[1].OccurredAt).Seconds(), 0.2)
		require.NoError(t, w3.Close(context.Background()))
		require.NoError(t, w4.Close(context.Background()))
	})
}

// An adopter of a window whose budget counts supervised time only adds the
// time since the lost owner's last heartbeat to the budget.
func TestAnAdopterAddsTheUnsupervisedTimeToASupervisedOnlyBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		owner := clock.NewMock()
		owner.Set(time.Now())
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(owner))
		t0 := time.Now()
		_, err := w1.Start(context.Background(), "agent", t0,
			watchdog.Policy{WallClock: time.Minute, ContinueWhenOwnerLost: true, SupervisedOnly: true})
		require.NoError(t, err)
		time.Sleep(2 * time.Second) // one heartbeat on the owner's clock
		owner.Add(2 * time.Second)
		synctest.Wait()
		// From here the owner is paused.
		w2 := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		evs := load(t, store.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		adoption, decision := evs[1], evs[2]
		gap := adoption.OccurredAt.Sub(adoption.OwnerLastSeen)
		assert.GreaterOrEqual(t, gap, watchdog.DefaultLeaseTTL, "adopted once the lease expired")
		assert.Equal(t, t0.Add(gap).UTC(), adoption.BudgetFrom, "the budget counts from the window's start plus the unsupervised gap")
		assert.Equal(t, t0.Add(gap).Add(time.Minute).UTC(), decision.OccurredAt.Add(-time.Nanosecond))
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mm)
		require.NoError(t, w1.Close(context.Background()))
		require.NoError(t, w2.Close(context.Background()))
	})
}

// An adopter that dies between the store's Adopt and its resume record
// leaves the window owned, in the store, by a lost owner: the next member
// adopts it from that owner and decides it like any orphan, in both
// behaviours (end: owner_lost at once; continue: the idle rule from the
// window's start, since no checkpoint was taken).
func TestAWindowWhoseAdopterDiedBeforeItsResumeIsAdoptedAgain(t *testing.T) {
	for _, cont := range []bool{false, true} {
		t.Run(fmt.Sprint("continue=", cont), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newLeaseStore()
				frozen := clock.NewMock()
				frozen.Set(time.Now())
				owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
				_, err := owner.Start(context.Background(), "agent", frozen.Now(),
					watchdog.Policy{WallClock: time.Hour, IdleWindow: 3 * time.Second, SettleChecks: 1, ContinueWhenOwnerLost: cont})
				require.NoError(t, err)
				time.Sleep(watchdog.DefaultLeaseTTL + time.Second) // the owner's lease expires

				// A member adopts the window in the store and dies at once.
				ctx := context.Background()
				require.NoError(t, store.Heartbeat(ctx, "ghost", watchdog.DefaultLeaseTTL, nil))
				orphans, err := store.Adopt(ctx, "ghost", 64)
				require.NoError(t, err)
				require.Len(t, orphans, 1)
				ghostSeen := time.Now()

				member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
				time.Sleep(watchdog.DefaultLeaseTTL + time.Minute)
				synctest.Wait()
				evs := load(t, store.MemoryStore, "agent")
				want := []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindStop}
				if cont {
					want = []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}
				}
				require.Equal(t, want, kinds(evs))
				assert.Equal(t, "ghost", evs[1].AdoptedFrom)
				assert.True(t, ghostSeen.Equal(evs[1].OwnerLastSeen))
				mm, err := watchdog.Replay(evs)
				require.NoError(t, err)
				assert.Empty(t, mm)
				require.NoError(t, owner.Close(ctx))
				require.NoError(t, member.Close(ctx))
			})
		})
	}
}

// An owner whose lease lapsed while it was paused still watches its window;
// a member adopted the window meanwhile and died before recording
// anything. The owner's verdict is fenced (the dead member held the window
// when the store judged it), and the owner's own sweep hands the window
// back to it while that refusal is still on its way: the owner looks at the
// window again at its next sweep and ends it (owner_lost) once its refused
// verdict is gone, rather than leaving it owned and watched by nobody.
func TestAnOwnerThatGetsItsWindowBackWhileItsVerdictIsFencedStillEndsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newLeaseStore()
		mock := clock.NewMock()
		mock.Set(time.Now())
		ctx := context.Background()
		owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(mock), watchdog.WithAdoption())
		// Due between the owner's sweeps (one a second on its clock).
		_, err := owner.Start(ctx, "agent", mock.Now(), watchdog.Policy{WallClock: 3500 * time.Millisecond})
		require.NoError(t, err)
		for range 3 { // heartbeats and sweeps on the owner's clock: a live owner
			mock.Add(time.Second)
			synctest.Wait()
		}
		// The owner pauses (its clock stands still) past its lease; a member
		// adopts its window in the store and dies at once.
		time.Sleep(watchdog.DefaultLeaseTTL + time.Second)
		require.NoError(t, store.Heartbeat(ctx, "ghost", time.Second, nil))
		orphans, err := store.Adopt(ctx, "ghost", 64)
		require.NoError(t, err)
		require.Len(t, orphans, 1)
		time.Sleep(2 * time.Second) // the ghost's lease expires

		// The owner wakes up at its deadline: its verdict is judged against
		// the ghost's hold, and the answer is held back.
		gate := make(chan struct{})
		store.lmu.Lock()
		store.gate = gate
		store.lmu.Unlock()
		mock.Add(500 * time.Millisecond) // the wall clock fires
		synctest.Wait()
		mock.Add(500 * time.Millisecond) // a sweep hands the window back to the owner
		synctest.Wait()
		assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, store.MemoryStore, "agent")))
		store.lmu.Lock()
		store.gate = nil
		store.lmu.Unlock()
		close(gate) // the verdict is refused: fenced
		synctest.Wait()
		for range 3 { // the next sweeps
			mock.Add(time.Second)
			synctest.Wait()
		}
		require.NoError(t, owner.Check(ctx))
		evs := load(t, store.MemoryStore, "agent")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindStop}, kinds(evs))
		assert.Equal(t, "ghost", evs[1].AdoptedFrom)
		assert.Equal(t, watchdog.StopOwnerLost, evs[2].Reason)
		require.NoError(t, owner.Close(ctx))
	})
}

// fencedSession starts a session on owner, whose clock is frozen (a paused
// process), lets member adopt its window (the owner's lease expired), calls
// started with the session, then has the owner record a stale observation
// of the idle rule, which the store fences; it returns once the session's
// context is done. Run it in a synctest bubble.
func fencedSession(t *testing.T, started func(*watchdog.Session)) (owner, member *watchdog.Watchdog, s *watchdog.Session) {
	store := newLeaseStore()
	frozen := clock.NewMock()
	frozen.Set(time.Now())
	owner = watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
	s, err := owner.Start(context.Background(), "agent", frozen.Now(),
		watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, SettleChecks: 3, SettleInterval: time.Second, ContinueWhenOwnerLost: true})
	require.NoError(t, err)
	started(s)
	member = watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption())
	time.Sleep(watchdog.DefaultLeaseTTL + time.Second)
	synctest.Wait()
	require.Equal(t, int64(1), member.Stats().Adopted, "adopted; the member watches it on")

	frozen.Add(2 * time.Second) // a stale observation, recorded: fenced
	require.NoError(t, owner.Check(context.Background()))
	<-s.Context().Done()
	return owner, member, s
}

// Stop on a session whose window the fleet took over (its owner was
// paused past its lease, then fenced) returns an error wrapping
// ErrAlreadyWatched, as Stop's doc says, not ErrClosed: the Watchdog is
// open. Its Run reports owner_lost.
func TestStopOnAFencedSessionReturnsErrAlreadyWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := make(chan watchdog.Result, 1)
		owner, member, s := fencedSession(t, func(s *watchdog.Session) {
			go func() {
				res, _ := s.Run(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
				ran <- res
			}()
		})
		err := s.Stop()
		require.ErrorIs(t, err, watchdog.ErrAlreadyWatched)
		require.NotErrorIs(t, err, watchdog.ErrClosed)
		assert.Equal(t, watchdog.StopOwnerLost, (<-ran).StopReasonCode)
		require.NoError(t, owner.Close(context.Background()))
		require.NoError(t, member.Close(context.Background()))
	})
}
