package watchdog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/whatif"
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

func whatIf(t *testing.T, events []watchdog.Event, candidate watchdog.Policy, every time.Duration) whatif.Window {
	t.Helper()
	r, err := whatif.Run(events, candidate, every)
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
	assert.Equal(t, whatif.Unchanged, w.Outcome, w.Undetermined)
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
	require.Equal(t, whatif.Later, w.Outcome, w.Undetermined)
	require.Len(t, w.Candidate, 1)
	assert.Equal(t, whatif.Decision{At: t0.Add(25*time.Second + 1), Rule: "idle", Mode: watchdog.ModeAct}, w.Candidate[0])
	assert.Equal(t, t0.Add(25*time.Second+1), w.DecidedUntil)
	assert.True(t, w.FalseStop)
	assert.Len(t, w.Changes, 2, "the recorded shadow decision goes, the candidate's act decision comes")
}

func TestWhatIfShorterIdleWindowStopsEarlier(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second, SettleChecks: 2, SettleInterval: 2 * time.Second}
	w := whatIf(t, events, cand, 0)
	require.Equal(t, whatif.Earlier, w.Outcome, w.Undetermined)
	assert.Equal(t, t0.Add(12*time.Second+1), w.Candidate[0].At, "stale at 10 s + 1 ns, again 2 s later")
	assert.True(t, w.FalseStop)
}

func TestWhatIfCandidateThatNeverDecidesAShadowDecision(t *testing.T) {
	events := whatIfLog(t, shadowIdle, watchdog.WithCheckpoints(time.Second))
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Minute}
	w := whatIf(t, events, cand, 0)
	assert.Equal(t, whatif.Never, w.Outcome, w.Undetermined)
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
	assert.Equal(t, whatif.Undetermined, w.Outcome)
	assert.Contains(t, w.Undetermined, "does not date stdout evidence")
	assert.True(t, w.DecidedUntil.Before(w.Recorded[0].At))
	assert.Empty(t, w.Candidate)
}

// The wall clock needs no evidence: it is decided from the window's start.
func TestWhatIfWallClockIsDecidedFromTheStartAlone(t *testing.T) {
	events := whatIfLog(t, watchdog.Policy{WallClock: time.Hour})
	w := whatIf(t, events, watchdog.Policy{WallClock: 20 * time.Second}, 0)
	require.Equal(t, whatif.Earlier, w.Outcome, w.Undetermined)
	assert.Equal(t, whatif.Decision{At: t0.Add(20*time.Second + 1), Rule: "wall_clock", Mode: watchdog.ModeAct}, w.Candidate[0])
	assert.True(t, w.FalseStop)
	assert.Equal(t, "completed at 2026-05-23T09:00:50Z", w.FalseStopWhy)
}

// silentTailLog records session "s" under a 1 h wall clock with
// checkpoints every second: output every second for 5 s, then silence
// until a completed stop at 50 s.
func silentTailLog(t *testing.T) []watchdog.Event {
	t.Helper()
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
	return events
}

// After the window's last observation the log knows nothing, unless the
// checkpoint interval is known: no checkpoint since then proves no output
// until one interval before the window's end. A log whose checkpoints do
// not carry it (written before they did) needs it given.
func TestWhatIfCheckpointIntervalDecidesTheSilenceAfterTheLastObservation(t *testing.T) {
	events := silentTailLog(t)
	for i := range events {
		events[i].LimitSeconds = 0 // the interval, not recorded
	}
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	unknown := whatIf(t, events, cand, 0)
	assert.Equal(t, whatif.Undetermined, unknown.Outcome)
	assert.Zero(t, unknown.CheckpointEvery)
	known := whatIf(t, events, cand, time.Second)
	require.Equal(t, whatif.Earlier, known.Outcome, known.Undetermined)
	assert.Equal(t, t0.Add(15*time.Second+1), known.Candidate[0].At)
	assert.Equal(t, "completed at 2026-05-23T09:00:50Z", known.FalseStopWhy)
	assert.Equal(t, time.Second, known.CheckpointEvery)
}

// A Watchdog with WithCheckpoints records its interval on each checkpoint
// (limit_seconds): what-if reads it from the log, with a tenth more for
// the pass's own time, and decides as with the interval given.
func TestWhatIfReadsTheCheckpointIntervalFromTheLog(t *testing.T) {
	events := silentTailLog(t)
	for _, e := range ofKind(events, watchdog.KindCheckpoint) {
		assert.Equal(t, 1.0, e.LimitSeconds, "the interval, on checkpoint %s", e.ID)
	}
	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	w := whatIf(t, events, cand, 0)
	require.Equal(t, whatif.Earlier, w.Outcome, w.Undetermined)
	assert.Equal(t, t0.Add(15*time.Second+1), w.Candidate[0].At)
	assert.Equal(t, "completed at 2026-05-23T09:00:50Z", w.FalseStopWhy)
	assert.Equal(t, 1100*time.Millisecond, w.CheckpointEvery)
}

// A window the recorded policy cancelled: the candidate that would not
// have stopped it by then stops it later (or never: the log ends there).
func TestWhatIfLaterThanARecordedCancel(t *testing.T) {
	act := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 1}
	events := whatIfLog(t, act)
	require.Equal(t, 1, countKind(events, watchdog.KindCancel))
	w := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}, 0)
	assert.Equal(t, whatif.Later, w.Outcome, w.Undetermined)
	assert.Equal(t, "cancel:idle_exceeded", w.End)
	assert.Empty(t, w.Candidate)
	same := whatIf(t, events, act, 0)
	assert.Equal(t, whatif.Unchanged, same.Outcome, same.Undetermined)
}

func TestWhatIfRefusesAnInvalidCandidate(t *testing.T) {
	_, err := whatif.Run(nil, watchdog.Policy{IdleWindow: -time.Second}, 0)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "no_output_deadline_seconds")
	_, err = whatif.Run(nil, watchdog.Policy{}, -time.Second)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	_, err = whatif.Run([]watchdog.Event{{ID: "x"}}, watchdog.Policy{}, 0)
	require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
	r, err := whatif.Run(nil, watchdog.Policy{}, 0)
	require.NoError(t, err)
	assert.Empty(t, r.Windows)
}

// A liveness rule's observations are not in the log: the candidate takes
// the recorded decision under the same settle limits (with its own mode),
// and is undetermined from the rule's first stale observation under others.
func TestWhatIfLivenessRuleFollowsTheRecordOnlyUnderTheSameSettleLimits(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second))
	ctx := context.Background()
	p := watchdog.Policy{WallClock: time.Hour, LivenessRules: []string{"queue"}, SettleChecks: 2, SettleInterval: time.Second, Mode: watchdog.ModeShadow}
	s, err := w.Start(ctx, "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 5*time.Second, w)
	for range 3 {
		_, err := s.ReportLiveness("queue", true)
		require.NoError(t, err)
		advance(t, mock, time.Second, w)
	}
	require.NoError(t, s.Stop())
	require.NoError(t, w.Close(ctx))
	events := load(t, store, "s")
	require.Equal(t, 1, countKind(events, watchdog.KindDecision))

	act := p
	act.Mode = ""
	same := whatIf(t, events, act, time.Second)
	require.Equal(t, whatif.Unchanged, same.Outcome, same.Undetermined)
	assert.Equal(t, watchdog.ModeAct, same.Candidate[0].Mode)
	assert.Equal(t, "queue", same.Candidate[0].Rule)
	assert.Len(t, same.Changes, 2, "shadow became act")

	other := p
	other.SettleChecks = 1
	w2 := whatIf(t, events, other, time.Second)
	assert.Equal(t, whatif.Undetermined, w2.Outcome)
	assert.Contains(t, w2.Undetermined, `liveness rule "queue"`)
	assert.Equal(t, t0.Add(5*time.Second), w2.DecidedUntil)

	without := whatIf(t, events, watchdog.Policy{WallClock: time.Hour}, time.Second)
	assert.Equal(t, whatif.Never, without.Outcome, without.Undetermined)
}

// The log records child waits only against the recorded ceiling: another
// ceiling is undetermined once the window is older than it, and decided
// before.
func TestWhatIfChildrenWaitCeilingIsUndeterminedPastItsAgeUnlessRecorded(t *testing.T) {
	events := whatIfLog(t, watchdog.Policy{WallClock: time.Hour}, watchdog.WithCheckpoints(time.Second))
	w := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, ChildrenWaitCeiling: 30 * time.Second}, time.Second)
	assert.Equal(t, whatif.Undetermined, w.Outcome)
	assert.Equal(t, t0.Add(30*time.Second+1), w.DecidedUntil)
	assert.Contains(t, w.Undetermined, "children wait")
	long := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, ChildrenWaitCeiling: time.Minute}, time.Second)
	assert.Equal(t, whatif.Unchanged, long.Outcome, long.Undetermined)
}

// Handlers in flight defer the idle rule, and the log records them only on
// verdicts: a window that shows one is undetermined where the idle rule
// would count, while its wall clock stays decidable.
func TestWhatIfHandlersInFlightMakeTheIdleRuleUndetermined(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second))
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second, SettleChecks: 1})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watchdog.Call(s.Context(), "tool", time.Minute, func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	testwait.For(t, started, "the call to start")
	advance(t, mock, 10*time.Second, w) // idle deferred by the call in flight: recorded
	close(release)
	require.NoError(t, testwait.For(t, done, "the call's result"))
	advance(t, mock, 10*time.Second, w)
	require.NoError(t, w.Close(ctx))
	events := load(t, store, "s")

	idle := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, IdleWindow: 3 * time.Second, SettleChecks: 1}, time.Second)
	assert.Equal(t, whatif.Undetermined, idle.Outcome)
	assert.Contains(t, idle.Undetermined, "handlers in flight")
	wall := whatIf(t, events, watchdog.Policy{WallClock: 2 * time.Second}, time.Second)
	assert.Equal(t, whatif.Earlier, wall.Outcome, wall.Undetermined)
}

// Several sessions and windows: each window is re-run on its own, in the
// order of its first event, and the totals add them up; a remote worker's
// checkpoint is not evidence the Watchdog saw.
func TestWhatIfTotalsAddUpTheWindowsAndIgnoreRemoteCheckpoints(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second))
	ctx := context.Background()
	p := watchdog.Policy{WallClock: 10 * time.Second}
	a, err := w.Start(ctx, "a", t0, p)
	require.NoError(t, err)
	_, err = w.Start(ctx, "b", t0, p)
	require.NoError(t, err)
	advance(t, mock, 3*time.Second, w)
	now := mock.Now()
	require.NoError(t, watchdog.RecordCheckpoint(ctx, store, watchdog.Checkpoint{SessionID: "a",
		Evidence: []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &now, Counter: 7}}}))
	require.NoError(t, a.Stop())
	advance(t, mock, 10*time.Second, w) // b: wall clock
	a2, err := w.Resume(ctx, "a", p)
	require.NoError(t, err)
	advance(t, mock, 5*time.Second, w)
	require.NoError(t, a2.Stop())
	require.NoError(t, w.Close(ctx))
	var events []watchdog.Event
	events = append(events, load(t, store, "a")...)
	events = append(events, load(t, store, "b")...)

	r, err := whatif.Run(events, watchdog.Policy{WallClock: 5 * time.Second, IdleWindow: time.Second, SettleChecks: 1}, time.Second)
	require.NoError(t, err)
	require.Len(t, r.Windows, 3)
	assert.Equal(t, []string{"a/1", "a/2", "b/1"}, []string{
		r.Windows[0].SessionID + "/1", r.Windows[1].SessionID + "/2", r.Windows[2].SessionID + "/1"})
	// The remote checkpoint's undated output (counter 7) would leave a/1
	// undetermined: the owner's checkpoints prove a silent stdout.
	for _, win := range r.Windows {
		assert.Equal(t, whatif.Earlier, win.Outcome, win.Undetermined)
		assert.Equal(t, "idle", win.Candidate[0].Rule)
		assert.Equal(t, win.OpenedAt.Add(time.Second+1), win.Candidate[0].At)
	}
	assert.Equal(t, "completed at 2026-05-23T09:00:03Z", r.Windows[0].FalseStopWhy)
	assert.Equal(t, whatif.Totals{Sessions: 2, Windows: 3, Earlier: 3, FalseStops: 2, Changes: 3}, r.Totals)
}

// Under the recorded policy itself, every window of a random simulation
// (random policies, evidence, child waits, waits, resumes, irregular looks)
// is unchanged or undetermined: WhatIf never claims a decision that the
// Watchdog did not take.
func TestWhatIfUnderTheRecordedPolicyNeverClaimsAChangeOnRandomLogs(t *testing.T) {
	decided, decisions, windows := 0, 0, 0
	for seed := range uint64(150) {
		_, events := simulate(t, seed)
		type key struct {
			id     string
			window int
		}
		byWindow := map[key][]watchdog.Event{}
		policies := map[key]watchdog.Policy{}
		for _, e := range events {
			k := key{e.AggregateID, e.Window}
			byWindow[k] = append(byWindow[k], e)
			if e.Policy != nil {
				if _, ok := policies[k]; !ok {
					policies[k] = *e.Policy
				}
			}
		}
		for k, evs := range byWindow {
			r, err := whatif.Run(evs, policies[k], 0)
			require.NoError(t, err)
			require.Len(t, r.Windows, 1)
			win := r.Windows[0]
			windows++
			switch win.Outcome {
			case whatif.Undetermined:
			case whatif.Unchanged:
				decided++
				if len(win.Recorded) > 0 {
					decisions++
					require.Equal(t, win.Recorded[0], win.Candidate[0], "seed %d %v", seed, k)
				}
			default:
				t.Fatalf("seed %d session %s window %d: %s\nrecorded %v\ncandidate %v", seed, k.id, k.window, win.Outcome, win.Recorded, win.Candidate)
			}
		}
	}
	t.Logf("%d of %d windows decided, %d of them with a recorded decision", decided, windows, decisions)
	assert.Positive(t, decisions)
}

// An empty log gives an empty report, not an error.
func TestWhatIfOfAnEmptyLogIsAnEmptyReport(t *testing.T) {
	r, err := whatif.Run(nil, watchdog.Policy{}, 0)
	require.NoError(t, err)
	assert.Empty(t, r.Windows)
	assert.Zero(t, r.Totals)
}

// toolCallLog records session "s" under p on a mock clock, with
// checkpoints every second and call records: stdout output at 1 s, a tool
// call "search" (cap 1 min) from 2 s to 12 s, output at 15 s, and a
// completed stop at 30 s (if p has not stopped the window by then).
func toolCallLog(t *testing.T, p watchdog.Policy) []watchdog.Event {
	t.Helper()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second), watchdog.WithCallRecords(16))
	ctx := context.Background()
	s, err := w.Start(ctx, "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, time.Second, w)
	s.Touch(watchdog.ChannelStdout)
	advance(t, mock, time.Second, w)
	toolCall(t, s, mock, w, "search", 10*time.Second)
	advance(t, mock, 3*time.Second, w)
	s.Touch(watchdog.ChannelStdout)
	advance(t, mock, 15*time.Second, w)
	if s.Context().Err() == nil {
		require.NoError(t, s.Stop())
	}
	advance(t, mock, time.Second, w)
	require.NoError(t, w.Close(ctx))
	return load(t, store, "s")
}

// toolCall runs a tool call name (cap 1 min) on s that ends after the mock
// clock has been advanced by d.
func toolCall(t *testing.T, s *watchdog.Session, mock *clock.Mock, w *watchdog.Watchdog, name string, d time.Duration) {
	t.Helper()
	call, err := watchdog.Begin(s.Context(), name, watchdog.CallLimits{Cap: time.Minute})
	require.NoError(t, err)
	advance(t, mock, d, w)
	require.NoError(t, call.End(nil))
}

// With WithCallRecords, the log holds every tool call's interval: a call
// in flight is bounded work that defers the idle rule, as the Watchdog
// does live, and what-if decides a stricter idle rule across it. The
// candidate's decision is the one a live Watchdog under the candidate
// takes on the same run.
func TestWhatIfDecidesAStricterIdleRuleAcrossToolCallsFromTheirRecords(t *testing.T) {
	recorded := watchdog.Policy{WallClock: time.Hour, IdleWindow: 9 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 3, Mode: watchdog.ModeShadow}
	events := toolCallLog(t, recorded)
	require.Equal(t, 1, countKind(events, watchdog.KindCallCompleted))
	deferred := false
	for _, e := range events {
		deferred = deferred || e.HandlersInFlight > 0
	}
	require.True(t, deferred, "a recorded verdict shows the call in flight")

	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1}
	live := ofKind(toolCallLog(t, cand), watchdog.KindDecision)
	require.NotEmpty(t, live, "the candidate decides live")
	w := whatIf(t, events, cand, 0)
	require.NotEqual(t, whatif.Undetermined, w.Outcome, w.Undetermined)
	require.NotEmpty(t, w.Candidate)
	assert.Equal(t, whatif.Decision{At: live[0].OccurredAt.UTC(), Rule: live[0].Rule, Mode: watchdog.ModeAct}, w.Candidate[0],
		"the live candidate's decision")
	assert.Equal(t, t0.Add(12*time.Second), w.Candidate[0].At, "deferred by the call in flight until it returned")
	assert.Equal(t, whatif.Earlier, w.Outcome)
	assert.True(t, w.FalseStop, "output at 15 s")
}

// A call that a verdict shows in flight but no record holds (a window with
// more calls than WithCallRecords' n: here n is 1, "search" from 2 s to 4 s
// is recorded, "fetch" from 5 s to 15 s is not) is in flight from its start
// to the last event that shows it; after that the log cannot say when it
// ended, and a call in flight defers the idle rule, so what-if reports the
// window undetermined from there, naming the call, rather than guess.
func TestWhatIfIsUndeterminedPastACallWithoutARecordOfItsEnd(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second), watchdog.WithCallRecords(1))
	ctx := context.Background()
	recorded := watchdog.Policy{WallClock: time.Hour, IdleWindow: 9 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 3, Mode: watchdog.ModeShadow}
	s, err := w.Start(ctx, "s", t0, recorded)
	require.NoError(t, err)
	advance(t, mock, time.Second, w)
	s.Touch(watchdog.ChannelStdout)
	advance(t, mock, time.Second, w)
	toolCall(t, s, mock, w, "search", 2*time.Second)
	advance(t, mock, time.Second, w)
	toolCall(t, s, mock, w, "fetch", 10*time.Second)
	advance(t, mock, 3*time.Second, w)
	s.Touch(watchdog.ChannelStdout)
	advance(t, mock, 12*time.Second, w)
	require.NoError(t, s.Stop())
	require.NoError(t, w.Close(ctx))
	events := load(t, store, "s")
	require.Len(t, ofKind(events, watchdog.KindCallCompleted), 1, "n is 1: search only")
	shown := false
	for _, e := range events {
		shown = shown || slices.ContainsFunc(e.CallsInFlight, func(c watchdog.CallInFlight) bool { return c.Name == "fetch" })
	}
	require.True(t, shown, "a recorded verdict shows fetch in flight")

	cand := watchdog.Policy{WallClock: time.Hour, IdleWindow: 5 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1}
	got := whatIf(t, events, cand, 0)
	assert.Equal(t, whatif.Undetermined, got.Outcome)
	assert.Contains(t, got.Undetermined, `the call "fetch" in flight at`)
	assert.Contains(t, got.Undetermined, "has no record of its end")
	assert.Empty(t, got.Candidate, "no decision claimed past what the log holds")
}

// A verdict lists at most the 100 oldest calls in flight and counts them
// all: with more in flight, what-if cannot tell from the log when the ones
// left out ended, so it reports the window undetermined from there rather
// than guess.
func TestWhatIfIsUndeterminedWhenAVerdictListsFewerCallsThanItCounts(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithCheckpoints(time.Second), watchdog.WithCallRecords(1000))
	ctx := context.Background()
	recorded := watchdog.Policy{WallClock: time.Hour, IdleWindow: 2 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 3, Mode: watchdog.ModeShadow}
	s, err := w.Start(ctx, "s", t0, recorded)
	require.NoError(t, err)
	var calls []*watchdog.CallHandle
	for range 101 {
		call, err := watchdog.Begin(s.Context(), "tool", watchdog.CallLimits{Cap: time.Minute})
		require.NoError(t, err)
		calls = append(calls, call)
	}
	advance(t, mock, 5*time.Second, w)
	for _, c := range calls {
		require.NoError(t, c.End(nil))
	}
	advance(t, mock, 10*time.Second, w)
	require.NoError(t, s.Stop())
	require.NoError(t, w.Close(ctx))
	events := load(t, store, "s")
	capped := false
	for _, e := range events {
		capped = capped || (e.HandlersInFlight == 101 && len(e.CallsInFlight) == 100)
	}
	require.True(t, capped, "a verdict lists 100 of the 101 calls in flight")

	got := whatIf(t, events, watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1}, 0)
	assert.Equal(t, whatif.Undetermined, got.Outcome)
	assert.Contains(t, got.Undetermined, "the verdict does not list them all")
}
