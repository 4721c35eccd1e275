package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// chaosStore fails Appends at random (with probability p) and logs every
// successful one, counting each event id it was given to keep.
type chaosStore struct {
	*watchdog.MemoryStore
	mu   sync.Mutex
	rng  *rand.Rand
	p    float64
	log  []watchdog.Event
	seen map[string]int
	dups []string
}

func (c *chaosStore) Append(ctx context.Context, evs ...watchdog.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p > 0 && c.rng.Float64() < c.p {
		return errors.New("chaos: store down")
	}
	if err := c.MemoryStore.Append(ctx, evs...); err != nil {
		return err
	}
	for _, e := range evs {
		c.seen[e.ID]++
		if c.seen[e.ID] > 1 {
			c.dups = append(c.dups, e.Kind+" "+e.AggregateID+" "+e.ID)
		}
		c.log = append(c.log, e)
	}
	return nil
}

// Under a store that fails 30% of appends, with sessions firing in bursts
// (several due in one pass), resumed between retries, and a Close that finds the
// store still failing in half the runs: no event is recorded twice, a
// session's windows never go back, nothing follows a window's terminal
// event, every cancel follows its own decision, and every fire's decision
// and cancel are recorded or named by Close as lost (and only those).
// Twenty seeded runs on the mock clock: deterministic.
func TestRandomStoreFailuresNeverReorderDuplicateOrLoseFireEvents(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { chaosRun(t, seed) })
	}
}

func chaosRun(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	store := &chaosStore{MemoryStore: watchdog.NewMemoryStore(), rng: rand.New(rand.NewSource(seed * 7)), p: 0.3, seen: map[string]int{}}
	mock := newMock()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store),
		watchdog.WithRetryBackoff(5*time.Millisecond, 40*time.Millisecond))
	ctx := context.Background()
	const nIDs = 12
	started := map[string]bool{}
	var all []*watchdog.Session
	var resumeErrs []string
	for step := 0; step < 150; step++ {
		switch k := rng.Intn(10); {
		case k < 3:
			id := fmt.Sprintf("s%d", rng.Intn(nIDs))
			pol := watchdog.Policy{WallClock: time.Duration(1+rng.Intn(4)) * time.Millisecond}
			if !started[id] {
				if ss, err := w.Start(ctx, id, mock.Now(), pol); err == nil {
					all = append(all, ss)
					started[id] = true
				}
			} else {
				if ss, err := w.Resume(ctx, id, pol); err == nil {
					all = append(all, ss)
				} else if !errors.Is(err, watchdog.ErrAlreadyWatched) {
					resumeErrs = append(resumeErrs, err.Error())
				}
			}
		case k < 8:
			mock.Add(time.Duration(rng.Intn(8)) * time.Millisecond)
			require.NoError(t, w.Check(ctx))
		default:
			require.NoError(t, w.Check(ctx))
		}
	}
	var lostIDs, lostMsgs []string
	if seed%2 == 0 {
		store.mu.Lock()
		store.p = 0
		store.mu.Unlock()
		for i := 0; i < 40; i++ {
			mock.Add(10 * time.Millisecond)
			require.NoError(t, w.Check(ctx))
		}
		err := w.Close(ctx)
		require.NoError(t, err)
	} else {
		err := w.Close(ctx)
		if err != nil {
			require.ErrorIs(t, err, watchdog.ErrNotRecorded)
			for _, m := range regexp.MustCompile(`\(event ([^)]+)\)`).FindAllStringSubmatch(err.Error(), -1) {
				lostIDs = append(lostIDs, m[1])
			}
			for _, m := range regexp.MustCompile(`cancel session "([^"]+)" window (\d+)`).FindAllStringSubmatch(err.Error(), -1) {
				lostMsgs = append(lostMsgs, m[1]+" "+m[2])
			}
		}
		store.mu.Lock()
		for _, id := range lostIDs {
			require.Zero(t, store.seen[id], "reported lost but recorded: %s", id)
		}
		store.mu.Unlock()
	}
	require.Empty(t, store.dups, "events recorded twice")
	require.Empty(t, resumeErrs)
	// Per-session invariants on the order of successful appends.
	per := map[string][]watchdog.Event{}
	for _, e := range store.log {
		per[e.AggregateID] = append(per[e.AggregateID], e)
	}
	for id, evs := range per {
		lastWin := 0
		ended := map[int]bool{}
		var lastDec string
		for i, e := range evs {
			require.GreaterOrEqual(t, e.Window, lastWin, "%s: window went back at %d: %v", id, i, kinds(evs))
			if e.Window > lastWin {
				require.Contains(t, []string{watchdog.KindStart, watchdog.KindResume}, e.Kind, "%s: window %d opens with %s: %v", id, e.Window, e.Kind, kinds(evs))
				lastWin = e.Window
			}
			require.False(t, ended[e.Window], "%s: event %s after window %d ended: %v", id, e.Kind, e.Window, kinds(evs))
			switch e.Kind {
			case watchdog.KindDecision:
				lastDec = e.ID
			case watchdog.KindCancel:
				require.Equal(t, lastDec, e.DecidedByDecisionID, "%s: cancel not after its decision: %v", id, kinds(evs))
			}
			if e.Terminal() {
				ended[e.Window] = true
			}
		}
	}
	lost := map[string]bool{}
	for _, id := range lostIDs {
		lost[id] = true
	}
	lostCancel := map[string]bool{}
	for _, m := range lostMsgs {
		lostCancel[m] = true
	}
	for _, ss := range all {
		var ve *watchdog.VerdictError
		if !errors.As(context.Cause(ss.Context()), &ve) {
			continue
		}
		require.True(t, store.seen[ve.DecisionID] == 1 || lost[ve.DecisionID], "%s w%d decision neither recorded nor reported", ss.ID(), ss.Window())
		found := false
		for _, e := range per[ss.ID()] {
			if e.Kind == watchdog.KindCancel && e.DecidedByDecisionID == ve.DecisionID {
				found = true
			}
		}
		require.True(t, found || lostCancel[fmt.Sprintf("%s %d", ss.ID(), ss.Window())], "%s w%d cancel neither recorded nor reported", ss.ID(), ss.Window())
	}
}
