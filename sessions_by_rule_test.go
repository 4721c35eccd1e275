package watchdog_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

func TestSessionsByRuleCountsEachArmedRuleInItsPolicysMode(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	ctx := context.Background()
	assert.Nil(t, w.SessionsByRule(), "nothing watched")

	for id, p := range map[string]watchdog.Policy{
		"plain": {}, // the wall clock only, acting
		"idle":  {IdleWindow: 10 * time.Second},
		"advised": {Mode: watchdog.ModeShadow, SessionCeiling: time.Hour,
			ChildrenWaitCeiling: time.Minute},
		"mixed": {IdleWindow: 10 * time.Second, LivenessRules: []string{"heartbeat"},
			RuleModes: map[string]watchdog.Mode{"idle": watchdog.ModeShadow}},
	} {
		_, err := w.Start(ctx, id, t0, p)
		require.NoError(t, err)
	}
	assert.Equal(t, map[watchdog.RuleMode]int{
		{"wall_clock", watchdog.ModeAct}:         3,
		{"wall_clock", watchdog.ModeShadow}:      1,
		{"idle", watchdog.ModeAct}:               1,
		{"idle", watchdog.ModeShadow}:            1,
		{"session_ceiling", watchdog.ModeShadow}: 1,
		{"children_wait", watchdog.ModeShadow}:   1,
		{"heartbeat", watchdog.ModeAct}:          1,
	}, w.SessionsByRule())
	assert.Equal(t, 4, w.Stats().Sessions, "the wall clock's modes add up to Stats.Sessions")
}

func TestSessionsByRuleDropsAWindowWhenItEndsButNotOnAShadowDecision(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	ctx := context.Background()
	stopped, err := w.Start(ctx, "stopped", t0, watchdog.Policy{})
	require.NoError(t, err)
	_, err = w.Start(ctx, "fired", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	_, err = w.Start(ctx, "advised", t0, watchdog.Policy{WallClock: time.Second, Mode: watchdog.ModeShadow})
	require.NoError(t, err)

	require.NoError(t, stopped.Stop())
	advance(t, mock, 2*time.Second, w) // "fired" is cancelled, "advised" only gets a decision
	assert.Equal(t, map[watchdog.RuleMode]int{{"wall_clock", watchdog.ModeShadow}: 1}, w.SessionsByRule())
}

func TestSessionsByRuleForgetsClosedSessionsAndAResumeCountsThemUnderTheRecordedPolicy(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	ctx := context.Background()
	first := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err := first.Start(ctx, "s", t0, watchdog.Policy{IdleWindow: time.Minute, Mode: watchdog.ModeShadow})
	require.NoError(t, err)
	require.NoError(t, first.Close(ctx))
	assert.Nil(t, first.SessionsByRule(), "Close ends no window in the log, but nothing is watched any more")

	second := newWatchdog(t, mock, store)
	_, err = second.Resume(ctx, "s", watchdog.Policy{}) // the open window keeps its recorded policy
	require.NoError(t, err)
	want := map[watchdog.RuleMode]int{{"wall_clock", watchdog.ModeShadow}: 1, {"idle", watchdog.ModeShadow}: 1}
	assert.Equal(t, want, second.SessionsByRule())
	assert.Nil(t, first.SessionsByRule(), "each Watchdog counts its own windows")
}

func TestSessionsByRuleFollowsAnAmendToTheNewPolicy(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, watchdog.Policy{IdleWindow: time.Minute, Mode: watchdog.ModeShadow})
	require.NoError(t, err)
	_, err = s.Amend(ctx, watchdog.Policy{IdleWindow: time.Minute}, "operator", "trusted now")
	require.NoError(t, err)
	assert.Equal(t, map[watchdog.RuleMode]int{{"wall_clock", watchdog.ModeAct}: 1, {"idle", watchdog.ModeAct}: 1},
		w.SessionsByRule())
}

// BenchmarkSessionsByRule100k measures one SessionsByRule call with
// 100,000 sessions watched: all under one policy, and alternating between
// two (each session then has a resolved policy of its own, the worst case
// for memory locality).
func BenchmarkSessionsByRule100k(b *testing.B) {
	one := []watchdog.Policy{{WallClock: time.Hour}}
	two := []watchdog.Policy{{WallClock: time.Hour}, {WallClock: time.Hour, IdleWindow: time.Minute, Mode: watchdog.ModeShadow}}
	for name, policies := range map[string][]watchdog.Policy{"one_policy": one, "two_policies": two} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			w := watchdog.New(watchdog.WithClock(newMock()))
			defer w.Close(ctx)
			for i := range 100_000 {
				if _, err := w.Start(ctx, "s"+strconv.Itoa(i), t0, policies[i%len(policies)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Check(ctx); err != nil { // the start events recorded
				b.Fatal(err)
			}
			want := 100_000 / len(policies)
			for b.Loop() {
				if n := w.SessionsByRule()[watchdog.RuleMode{Rule: "wall_clock", Mode: watchdog.ModeAct}]; n != want {
					b.Fatal(n)
				}
			}
		})
	}
}
