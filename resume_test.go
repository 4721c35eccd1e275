package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// settlePolicy is an idle rule with a settle window: 10 s of silence, then
// 3 stale checks 5 s apart.
func settlePolicy() watchdog.Policy {
	return watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 3, SettleInterval: 5 * time.Second}
}

// idleDecisionAt runs session "s" under settlePolicy with one output at
// t0+2s; with restartAt > 0 its supervisor goes away at t0+restartAt and a
// new one resumes the window. It returns the idle decision's instant and
// the session's events.
func idleDecisionAt(t *testing.T, restartAt time.Duration) (time.Time, []watchdog.Event) {
	t.Helper()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w.Start(context.Background(), "s", t0, settlePolicy())
	require.NoError(t, err)
	advance(t, mock, 2*time.Second, w)
	s.Touch(watchdog.ChannelStdout)
	if restartAt > 0 {
		advance(t, mock, restartAt-2*time.Second, w)
		require.NoError(t, w.Close(context.Background())) // the supervisor goes away
		w = newWatchdog(t, mock, store)
		s, err = w.Resume(context.Background(), "s", watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
	}
	for i := 0; i < 60 && s.Context().Err() == nil; i++ {
		advance(t, mock, time.Second, w)
	}
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	evs := load(t, store, "s")
	decisions := ofKind(evs, watchdog.KindDecision)
	require.Len(t, decisions, 1)
	return decisions[0].OccurredAt, evs
}

// A Resume of an open window continues the idle rule from the window's
// records: the last recorded output and the settle count reached, so the
// session is stopped at the instant an uninterrupted supervisor would have
// stopped it, not one idle window and settle window after the resume.
func TestAResumeContinuesTheIdleSilenceAndTheSettleCountFromTheWindowsRecords(t *testing.T) {
	want, _ := idleDecisionAt(t, 0)
	// Restart after the first stale check (t0+12s, settle 1 of 3) was recorded.
	got, evs := idleDecisionAt(t, 15*time.Second)
	assert.Equal(t, want, got, "the same instant as without the restart")
	assert.Equal(t, t0.Add(2*time.Second+10*time.Second+2*5*time.Second+time.Nanosecond), got, "silent for more than 10 s, then two more checks")

	resume := ofKind(evs, watchdog.KindResume)
	require.Len(t, resume, 1)
	require.NotEmpty(t, resume[0].EvidenceSummary, "the resume records the evidence it continues from")
	assert.Equal(t, "stdout", resume[0].EvidenceSummary[0].Channel)
	require.NotNil(t, resume[0].EvidenceSummary[0].LastAt)
	assert.Equal(t, t0.Add(2*time.Second), *resume[0].EvidenceSummary[0].LastAt)
	assert.True(t, resume[0].ObservedSince.IsZero(), "evidence counts from the window's start")
	verdicts := ofKind(evs, watchdog.KindVerdict)
	require.NotEmpty(t, verdicts)
	assert.Equal(t, 2, verdicts[len(verdicts)-1].SettleCount, "the count went on from 1 to 2, not back to 1")
	mm, err := watchdog.Replay(evs)
	require.NoError(t, err)
	assert.Empty(t, mm)
}

// With nothing recorded about the window's evidence (no verdict before the
// restart), a Resume starts the evidence rules again at its own instant and
// its record says so (observed_since); a second restart then continues
// from that recorded instant instead of restarting again.
func TestAResumeWithNoRecordedEvidenceRestartsTheEvidenceRulesAndSaysSo(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	p := settlePolicy()
	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, err := w1.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 2*time.Second, w1)
	s.Touch(watchdog.ChannelStdout) // never recorded: no verdict before the restart
	advance(t, mock, 3*time.Second, w1)
	require.NoError(t, w1.Close(context.Background()))

	w2 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err = w2.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	resumedAt := mock.Now()
	advance(t, mock, 4*time.Second, w2)
	require.NoError(t, w2.Close(context.Background()))

	w3 := newWatchdog(t, mock, store)
	s3, err := w3.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	require.NoError(t, w3.Check(context.Background()))
	evs := load(t, store, "s")
	resumes := ofKind(evs, watchdog.KindResume)
	require.Len(t, resumes, 2)
	assert.Equal(t, resumedAt, resumes[0].ObservedSince, "the rules start again at the first resume")
	assert.Equal(t, resumedAt, resumes[1].ObservedSince, "and the second continues from it")

	for i := 0; i < 60 && s3.Context().Err() == nil; i++ {
		advance(t, mock, time.Second, w3)
	}
	require.ErrorIs(t, context.Cause(s3.Context()), watchdog.ErrIdleExceeded)
	decisions := ofKind(load(t, store, "s"), watchdog.KindDecision)
	require.Len(t, decisions, 1)
	assert.Equal(t, resumedAt.Add(10*time.Second+2*5*time.Second+time.Nanosecond), decisions[0].OccurredAt)
	mm, err := watchdog.Replay(load(t, store, "s"))
	require.NoError(t, err)
	assert.Empty(t, mm)
}

// Under Policy.SupervisedOnly the wall-clock budget counts supervised time
// only: a resume after the supervisor was gone adds the gap since its last
// record to the budget, records the instant the budget counts from
// (budget_from) on the window's later events, and replay re-derives the
// fire. The default budget counts wall-clock time: the same restart leaves
// the deadline where it was.
func TestASupervisedOnlyBudgetDoesNotCountTheTimeNoSupervisorRan(t *testing.T) {
	for _, supervised := range []bool{false, true} {
		mock := newMock()
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: time.Minute, SupervisedOnly: supervised}
		w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
		_, err := w1.Start(context.Background(), "s", t0, p) // the supervisor's last record: t0
		require.NoError(t, err)
		advance(t, mock, 20*time.Second, w1)
		require.NoError(t, w1.Close(context.Background())) // the supervisor goes away
		advance(t, mock, 30*time.Second)                   // t0+50s: nobody watches

		w2 := newWatchdog(t, mock, store)
		s, err := w2.Resume(context.Background(), "s", p)
		require.NoError(t, err)
		want := t0.Add(time.Minute)
		if supervised {
			want = want.Add(50 * time.Second) // unsupervised since the last record, t0
		}
		assert.Equal(t, want, s.Deadline(), "supervised=%v", supervised)
		advance(t, mock, want.Sub(mock.Now()), w2)
		require.NoError(t, s.Context().Err())
		advance(t, mock, time.Nanosecond, w2)
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

		evs := load(t, store, "s")
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		if supervised {
			assert.Equal(t, t0.Add(50*time.Second), evs[1].BudgetFrom, "the resume records where the budget counts from")
			assert.Equal(t, t0.Add(50*time.Second), evs[2].BudgetFrom)
			assert.InDelta(t, 60.0, evs[2].MeasureSeconds, 1e-6, "the decision measures supervised time")
		} else {
			assert.True(t, evs[1].BudgetFrom.IsZero())
		}
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mm, "replay re-derives the fire (supervised=%v)", supervised)
	}
}
