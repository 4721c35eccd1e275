package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// A liveness rule of your own follows the settle window: stale, stale,
// fresh, stale, stale does not act; three consecutive stale observations do,
// once.
func TestUserLivenessRuleActsOnlyOnConsecutiveStaleObservations(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{LivenessRules: []string{"db_probe"}, SettleChecks: 3, SettleInterval: 5 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)

	report := func(stale bool) bool {
		t.Helper()
		d, err := s.ReportLiveness("db_probe", stale)
		require.NoError(t, err)
		advance(t, mock, 5*time.Second, w)
		return d
	}
	for _, stale := range []bool{true, true, false, true} {
		assert.False(t, report(stale))
	}
	d, err := s.ReportLiveness("db_probe", true) // stale 2, at 20 s
	require.NoError(t, err)
	assert.False(t, d)
	advance(t, mock, 2*time.Second, w)
	d, err = s.ReportLiveness("db_probe", true) // too early: the interval spaces observations
	require.NoError(t, err)
	assert.False(t, d)
	require.NoError(t, s.Context().Err())
	advance(t, mock, 3*time.Second, w)
	assert.True(t, report(true), "the third consecutive stale observation decides")
	cause := context.Cause(s.Context())
	require.ErrorIs(t, cause, watchdog.ErrLivenessFailed)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.Equal(t, "db_probe", v.Rule)
	assert.Equal(t, "watchdog_liveness_failed", v.StopReasonCode())

	evs := load(t, store, "s")
	var counts []int
	for _, e := range ofKind(evs, watchdog.KindVerdict) {
		counts = append(counts, e.SettleCount)
	}
	assert.Equal(t, []int{1, 2, 1, 2}, counts)
	dec, c := ofKind(evs, watchdog.KindDecision), ofKind(evs, watchdog.KindCancel)
	require.Len(t, dec, 1)
	require.Len(t, c, 1)
	assert.Equal(t, dec[0].ID, c[0].DecidedByDecisionID)
	mism, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mism)
	_, err = s.ReportLiveness("db_probe", true)
	require.ErrorIs(t, err, watchdog.ErrLivenessFailed, "after the end, the cause")
}

func TestUserLivenessRuleInShadowAdvisesOncePerEpisode(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{LivenessRules: []string{"probe"}, SettleChecks: 1, SettleInterval: time.Second,
		RuleModes: map[string]watchdog.Mode{"probe": watchdog.ModeShadow}}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	for _, stale := range []bool{true, true, true, false, true} {
		_, err := s.ReportLiveness("probe", stale)
		require.NoError(t, err)
		advance(t, mock, time.Second, w)
	}
	require.NoError(t, s.Context().Err())
	dec := ofKind(load(t, store, "s"), watchdog.KindDecision)
	require.Len(t, dec, 2, "one per stale episode")
	assert.Equal(t, watchdog.ModeShadow, dec[0].Mode)
}

func TestUserLivenessRulesMustBeDeclared(t *testing.T) {
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	_, err = s.ReportLiveness("undeclared", true)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	for _, p := range []watchdog.Policy{
		{LivenessRules: []string{"idle"}},
		{LivenessRules: []string{"x", "x"}},
		{RuleModes: map[string]watchdog.Mode{"x": watchdog.ModeShadow}},
	} {
		require.ErrorIs(t, p.Validate(), watchdog.ErrInvalidPolicy)
	}
	require.NoError(t, watchdog.Policy{LivenessRules: []string{"x"}, RuleModes: map[string]watchdog.Mode{"x": watchdog.ModeShadow}}.Validate())
}

// fired_at is the decision's instant however late the custom action
// completes: here the action of a liveness rule returns after the clock
// moved on 5 s, and the cancel records that instant as occurred_at and the
// decision's as fired_at, on every run.
func TestACustomActionsCancelIsFiredAtTheDecisionsInstant(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	entered, release := make(chan struct{}), make(chan struct{})
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error {
		close(entered)
		<-release
		return nil
	}))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{
		WallClock: time.Hour, SettleChecks: 1, LivenessRules: []string{"probe"},
		RuleModes: map[string]watchdog.Mode{"probe": watchdog.ModeAct},
	})
	require.NoError(t, err)
	advance(t, mock, time.Second, w)
	decided, err := s.ReportLiveness("probe", true)
	require.NoError(t, err)
	require.True(t, decided)
	testwait.For(t, entered, "the liveness action to be entered")
	mock.Add(5 * time.Second) // the action is slow
	close(release)
	require.NoError(t, w.Check(context.Background()))
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrLivenessFailed)

	evs := load(t, store, "s")
	d, c := ofKind(evs, watchdog.KindDecision), ofKind(evs, watchdog.KindCancel)
	require.Len(t, d, 1)
	require.Len(t, c, 1)
	assert.Equal(t, t0.Add(time.Second), d[0].OccurredAt)
	assert.Equal(t, d[0].OccurredAt, c[0].FiredAt, "fired at the decision")
	assert.Equal(t, t0.Add(6*time.Second), c[0].OccurredAt, "recorded when the action completed")
	mismatches, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mismatches)
}
