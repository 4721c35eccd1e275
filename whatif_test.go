package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// whatIfLog records one session "s" through the library on a mock clock:
// stdout output every second for 5 s, silence until 40 s, one more line at
// 40 s, and a completed stop at 50 s, under recorded, with the options
// given (WithCheckpoints). It returns the session's events.
func whatIfLog(t *testing.T, recorded watchdog.Policy, opts ...watchdog.Option) []watchdog.Event {
	t.Helper()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, opts...)
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, recorded)
	require.NoError(t, err)
	for range 5 {
		advance(t, mock, time.Second, w)
		s.Touch(watchdog.ChannelStdout)
	}
	advance(t, mock, 35*time.Second, w)
	if s.Context().Err() == nil {
		s.Touch(watchdog.ChannelStdout)
		advance(t, mock, 10*time.Second, w)
		err = s.Stop()
		require.NoError(t, err)
	}
	advance(t, mock, time.Second, w)
	require.NoError(t, w.Close(ctx))
	return load(t, store, "s")
}

func whatIf(t *testing.T, events []watchdog.Event, candidate watchdog.Policy, every time.Duration) watchdog.WhatIfWindow {
	t.Helper()
	r, err := watchdog.WhatIf(events, candidate, every)
	require.NoError(t, err)
	require.Len(t, r.Windows, 1)
	assert.Equal(t, 1, r.Totals.Windows)
	assert.Equal(t, 1, r.Totals.Sessions)
	return r.Windows[0]
}

var shadowIdle = watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1, Mode: watchdog.ModeShadow}

func TestWhatIfWithTheRecordedPolicyChangesNothing(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	w := whatIf(t, events, shadowIdle, time.Second)
	assert.Equal(t, watchdog.WhatIfUnchanged, w.Outcome, w.Undetermined)
	require.NotEmpty(t, w.Recorded)
	assert.Equal(t, w.Recorded[0], w.Candidate[0])
	assert.Empty(t, w.Changes)
	assert.Equal(t, "stop:completed", w.End)
	assert.True(t, w.FalseStop, "the recorded shadow decision was followed by output at 40 s")
	assert.Contains(t, w.FalseStopWhy, "stdout evidence at 2026-05-23T09:00:40Z")
}

func TestWhatIfLongerIdleWindowStopsLaterAndIsAFalseStop(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 20 * time.Second, SettleChecks: 1}
	w := whatIf(t, events, cand, 0) // the counters alone date every line
	require.Equal(t, watchdog.WhatIfLater, w.Outcome, w.Undetermined)
	require.Len(t, w.Candidate, 1)
	assert.Equal(t, watchdog.WhatIfDecision{At: t0.Add(25*time.Second + 1), Rule: "idle", Mode: watchdog.ModeAct}, w.Candidate[0])
	assert.Equal(t, t0.Add(25*time.Second+1), w.DecidedUntil)
	assert.True(t, w.FalseStop)
	assert.Len(t, w.Changes, 2, "the recorded shadow decision goes, the candidate's act decision comes")
}

func TestWhatIfShorterIdleWindowStopsEarlier(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second, SettleChecks: 2, SettleInterval: 2 * time.Second}
	w := whatIf(t, events, cand, 0)
	require.Equal(t, watchdog.WhatIfEarlier, w.Outcome, w.Undetermined)
	assert.Equal(t, t0.Add(12*time.Second+1), w.Candidate[0].At, "stale at 10 s + 1 ns, again 2 s later")
	assert.True(t, w.FalseStop)
}

func TestWhatIfCandidateThatNeverDecidesAShadowDecision(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Minute}
	w := whatIf(t, events, cand, 0)
	assert.Equal(t, watchdog.WhatIfNever, w.Outcome, w.Undetermined)
	assert.Empty(t, w.Candidate)
	assert.Equal(t, w.EndedAt, w.DecidedUntil)
	assert.False(t, w.FalseStop)
}

// A log of verdicts alone cannot answer for a stricter idle rule: the
// output between the window's start and the recorded decision is counted
// but not dated.
func TestWhatIfWithoutCheckpointsIsUndeterminedForAStricterIdleRule(t *testing.T) {
	events := whatIfLog(t, shadowIdle)
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 3 * time.Second, SettleChecks: 1}
	w := whatIf(t, events, cand, 0)
	assert.Equal(t, watchdog.WhatIfUndetermined, w.Outcome)
	assert.Contains(t, w.Undetermined, "does not date stdout evidence")
	assert.True(t, w.DecidedUntil.Before(w.Recorded[0].At))
	assert.Empty(t, w.Candidate)
}

// The wall clock needs no evidence: it is decided from the window's start.
func TestWhatIfWallClockIsDecidedFromTheStartAlone(t *testing.T) {
	events := whatIfLog(t, watchdog.Policy{WallClock: time.Hour})
	w := whatIf(t, events, watchdog.Policy{WallClock: 20 * time.Second}, 0)
	require.Equal(t, watchdog.WhatIfEarlier, w.Outcome, w.Undetermined)
	assert.Equal(t, watchdog.WhatIfDecision{At: t0.Add(20*time.Second + 1), Rule: "wall_clock", Mode: watchdog.ModeAct}, w.Candidate[0])
	assert.True(t, w.FalseStop)
	assert.Equal(t, "completed at 2026-05-23T09:00:50Z", w.FalseStopWhy)
}

// After the window's last observation the log knows nothing, unless the
// checkpoint interval is given: no checkpoint since then proves no output
// until one interval before the window's end.
func TestWhatIfCheckpointIntervalDecidesTheSilenceAfterTheLastObservation(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second))
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	for range 5 {
		advance(t, mock, time.Second, w)
		s.Touch(watchdog.ChannelStdout)
	}
	advance(t, mock, 45*time.Second, w)
	err = s.Stop()
	require.NoError(t, err)
	require.NoError(t, w.Close(ctx))
	events := load(t, store, "s")
	require.Positive(t, countKind(events, watchdog.KindCheckpoint))

	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	unknown := whatIf(t, events, cand, 0)
	assert.Equal(t, watchdog.WhatIfUndetermined, unknown.Outcome)
	known := whatIf(t, events, cand, time.Second)
	require.Equal(t, watchdog.WhatIfEarlier, known.Outcome, known.Undetermined)
	assert.Equal(t, t0.Add(15*time.Second+1), known.Candidate[0].At)
	assert.Equal(t, "completed at 2026-05-23T09:00:50Z", known.FalseStopWhy)
}

// A window the recorded policy cancelled: the candidate that would not
// have stopped it by then stops it later (or never: the log ends there).
func TestWhatIfLaterThanARecordedCancel(t *testing.T) {
	act := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	events := whatIfLog(t, act)
	require.Equal(t, 1, countKind(events, watchdog.KindCancel))
	w := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}, 0)
	assert.Equal(t, watchdog.WhatIfLater, w.Outcome, w.Undetermined)
	assert.Equal(t, "cancel:idle_exceeded", w.End)
	assert.Empty(t, w.Candidate)
	same := whatIf(t, events, act, 0)
	assert.Equal(t, watchdog.WhatIfUnchanged, same.Outcome, same.Undetermined)
}

func TestWhatIfRefusesAnInvalidCandidate(t *testing.T) {
	_, err := watchdog.WhatIf(nil, watchdog.Policy{IdleWindow: -time.Second}, 0)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "no_output_deadline_seconds")
	_, err = watchdog.WhatIf(nil, watchdog.Policy{}, -time.Second)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	_, err = watchdog.WhatIf([]watchdog.Event{{ID: "x"}}, watchdog.Policy{}, 0)
	require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
	r, err := watchdog.WhatIf(nil, watchdog.Policy{}, 0)
	require.NoError(t, err)
	assert.Empty(t, r.Windows)
}
