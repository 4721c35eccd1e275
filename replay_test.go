package watchdog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// manualClock is a fake clock without timers: the test moves it and calls
// Check, the only thing that decides. AfterFunc returns nil, as Clock allows.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(time.Duration, func()) *clock.Timer { return nil }

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// step moves the clock by d, stopping at every deadline on the way.
func (c *manualClock) step(t testing.TB, w *watchdog.Watchdog, d time.Duration) {
	target := c.Now().Add(d)
	for {
		next, ok := w.NextDeadline()
		if !ok || next.After(target) {
			break
		}
		if next.After(c.Now()) {
			c.set(next)
		}
		require.NoError(t, w.Check(context.Background()))
	}
	c.set(target)
	require.NoError(t, w.Check(context.Background()))
}

// simulate drives a Watchdog from seed: random policies, evidence, child
// waits, waits, stops and time steps. It returns the log as JSON Lines.
func simulate(t testing.TB, seed uint64) ([]byte, []watchdog.Event) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	clk := &manualClock{now: t0}
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(clk), watchdog.WithStore(store), watchdog.WithEventIDPrefix("sim-"))
	ids := []string{"a", "b", "c"}
	sessions := map[string]*watchdog.Session{}
	waits := map[string][]func(){}
	pick := func(ds ...time.Duration) time.Duration { return ds[r.IntN(len(ds))] }
	start := func(id string) {
		p := watchdog.Policy{
			WallClock:           pick(30*time.Second, 90*time.Second, 5*time.Minute),
			IdleWindow:          pick(0, 5*time.Second, 10*time.Second),
			EvidenceTTL:         pick(0, watchdog.Off, 3*time.Second, 8*time.Second),
			SettleChecks:        r.IntN(4),
			SettleInterval:      pick(0, time.Second, 3*time.Second),
			SessionCeiling:      pick(0, 0, 4*time.Minute),
			ChildrenWaitCeiling: pick(0, 20*time.Second),
			StartupGrace:        pick(0, 0, 4*time.Second),
			MaxIdleDeferral:     pick(0, 0, 15*time.Second),
			Channels:            []string{"browser"},
		}
		if r.IntN(4) == 0 {
			p.RuleModes = map[string]watchdog.Mode{"idle": watchdog.ModeShadow}
		}
		if r.IntN(8) == 0 {
			p.Mode = watchdog.ModeShadow
		}
		var s *watchdog.Session
		var err error
		if _, known := sessions[id]; known {
			s, err = w.Resume(context.Background(), id, p)
		} else {
			s, err = w.Start(context.Background(), id, clk.Now(), p)
		}
		require.NoError(t, err)
		sessions[id] = s
	}
	for _, id := range ids {
		start(id)
	}
	for i := 0; i < 60; i++ {
		id := ids[r.IntN(len(ids))]
		s := sessions[id]
		switch op := r.IntN(10); {
		case op < 4:
			s.Touch(watchdog.Channel(r.IntN(5)))
		case op == 4:
			s.Progress(watchdog.ChannelSubagent, uint64(r.IntN(5)))
		case op == 5:
			waits[id] = append(waits[id], s.BeginChildWait())
		case op == 6 && len(waits[id]) > 0:
			waits[id][0]()
			waits[id] = waits[id][1:]
		case op == 7 && r.IntN(3) == 0:
			if s.Context().Err() != nil {
				start(id) // resume: a fresh window
			} else {
				s.Wait(pick(0, 5*time.Second, 20*time.Second), nil)
			}
		case op == 8:
			s.EndWait()
		default:
			clk.step(t, w, time.Duration(r.IntN(6000))*time.Millisecond)
		}
	}
	clk.step(t, w, 2*time.Minute)
	require.NoError(t, w.Close(context.Background()))
	var buf bytes.Buffer
	var all []watchdog.Event
	for _, id := range ids {
		evs, err := store.Load(context.Background(), id)
		require.NoError(t, err)
		all = append(all, evs...)
	}
	// The global order is the store's.
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[j].Seq < all[i].Seq {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	for _, e := range all {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), all
}

// Deterministic simulation: the same seed gives a byte-identical log, and
// Replay re-derives every verdict of it.
func TestSeededSimulationsGiveByteIdenticalLogsThatReplay(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	kinds := map[string]int{}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		a, evs := simulate(t, seed)
		b, _ := simulate(t, seed)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two runs wrote different logs:\n%s\n---\n%s", seed, a, b)
		}
		mism, err := watchdog.Replay(evs)
		require.NoError(t, err)
		if len(mism) > 0 {
			t.Fatalf("seed %d: replay mismatches: %v\nlog:\n%s", seed, mism, a)
		}
		for _, e := range evs {
			kinds[e.Kind]++
		}
	}
	t.Logf("%d seeds, events by kind: %v", seeds, kinds)
	for _, k := range []string{watchdog.KindVerdict, watchdog.KindDecision, watchdog.KindCancel, watchdog.KindWaitTimeout} {
		assert.Positive(t, kinds[k], "the simulations exercised %s", k)
	}
}

// Replay re-derives every verdict of a recorded log; a tampered
// event is reported.
func TestReplayReportsATamperedEvent(t *testing.T) {
	_, evs := simulate(t, 7)
	mism, err := watchdog.Replay(evs)
	require.NoError(t, err)
	require.Empty(t, mism)

	tampered := 0
	for i, e := range evs {
		if e.Kind != watchdog.KindDecision || e.Rule != "idle" && e.Rule != "wall_clock" {
			continue
		}
		bad := append([]watchdog.Event(nil), evs...)
		fresh := e.OccurredAt // pretend stdout had spoken at the verdict's instant
		sum := append([]watchdog.EvidenceEntry(nil), e.EvidenceSummary...)
		sum[0].LastAt = &fresh
		bad[i].EvidenceSummary = sum
		bad[i].WindowStartedAt = e.OccurredAt // and that the window just began
		mism, err := watchdog.Replay(bad)
		require.NoError(t, err)
		require.Len(t, mism, 1, "decision %s", e.ID)
		assert.Equal(t, e.ID, mism[0].Event.ID)
		assert.Contains(t, mism[0].String(), "HARD_STOP")
		tampered++
	}
	require.Positive(t, tampered)

	// An outcome that links no decision is reported too.
	for i, e := range evs {
		if e.Kind == watchdog.KindCancel {
			bad := append([]watchdog.Event(nil), evs...)
			bad[i].DecidedByDecisionID = "forged"
			mism, err := watchdog.Replay(bad)
			require.NoError(t, err)
			require.Len(t, mism, 1)
			assert.Contains(t, mism[0].Derived, "no such decision")
			break
		}
	}
}

func TestReplayReDerivesEveryVerdictOfTheCliTodoLog(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "cli-todo", t0, watchdog.Policy{WallClock: 10 * time.Second, IdleWindow: 3 * time.Second})
	require.NoError(t, err)
	for i := 0; i < 4; i++ {
		advance(t, mock, 2*time.Second, w)
		s.Touch(watchdog.ChannelWorkspace)
	}
	advance(t, mock, time.Minute, w)
	evs := load(t, store, "cli-todo")
	mism, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mism, fmt.Sprint(kinds(evs)))
	assert.NotEmpty(t, ofKind(evs, watchdog.KindVerdict))
}

// Replay flags every break in the decision-first chain of a session the
// Watchdog recorded: a cancel with no decided_by_decision_id, and an act
// decision that no outcome links and no end of its window follows (the
// action never ran, or its outcome was lost).
func TestReplayFlagsACancelOrADecisionThatIsNotLinked(t *testing.T) {
	_, evs := simulate(t, 7)
	var cancel, decision = -1, -1
	for i, e := range evs {
		if e.Kind == watchdog.KindCancel && cancel < 0 {
			cancel = i
			for j := range evs[:i] {
				if evs[j].ID == e.DecidedByDecisionID {
					decision = j
				}
			}
		}
	}
	require.True(t, cancel >= 0 && decision >= 0)

	blank := append([]watchdog.Event(nil), evs...)
	blank[cancel].DecidedByDecisionID = ""
	mism, err := watchdog.Replay(blank)
	require.NoError(t, err)
	require.Len(t, mism, 1, "%v", mism)
	assert.Equal(t, evs[cancel].ID, mism[0].Event.ID, "the cancel links nothing")
	assert.Contains(t, mism[0].Recorded, "no decided_by_decision_id")

	dropped := append(append([]watchdog.Event(nil), evs[:cancel]...), evs[cancel+1:]...)
	mism, err = watchdog.Replay(dropped)
	require.NoError(t, err)
	require.Len(t, mism, 1, "%v", mism)
	assert.Equal(t, evs[decision].ID, mism[0].Event.ID)
	assert.Contains(t, mism[0].Derived, "an outcome linking it")

	// A decision whose window ended otherwise (a stop overtook the action)
	// needs no outcome; nor does a shadow decision.
	stopped := append([]watchdog.Event(nil), dropped...)
	stop := evs[cancel]
	stop.Kind, stop.DecidedByDecisionID, stop.Reason = watchdog.KindStop, "", watchdog.StopCompleted
	stopped = append(stopped[:cancel], append([]watchdog.Event{stop}, stopped[cancel:]...)...)
	mism, err = watchdog.Replay(stopped)
	require.NoError(t, err)
	assert.Empty(t, mism)
}
