package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// With WithCheckpoints a single process (here with the memory store; the
// file store is the same through the recorder) records the evidence of
// windows whose evidence changed, once per change: after a restart, Resume
// continues the idle rule from the last output instead of starting it
// again at the resume.
func TestCheckpointsLetAResumeContinueTheIdleRuleAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithCheckpoints(2*time.Second))
		defer w1.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		t0 := time.Now()
		s, err := w1.Start(context.Background(), "agent", t0, p)
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		touched := time.Now().UTC()
		s.Touch(watchdog.ChannelStdout)
		time.Sleep(10 * time.Second) // five passes: one checkpoint, of the one change
		synctest.Wait()
		require.NoError(t, w1.Close(context.Background())) // the process goes away
		cps := ofKind(load(t, store, "agent"), watchdog.KindCheckpoint)
		require.Len(t, cps, 1, "one checkpoint per change, not one per pass")
		require.NotNil(t, cps[0].EvidenceSummary[0].LastAt)
		assert.WithinDuration(t, touched, *cps[0].EvidenceSummary[0].LastAt, 50*time.Millisecond)
		assert.NotEmpty(t, cps[0].Owner)

		time.Sleep(5 * time.Second)
		w2 := watchdog.New(watchdog.WithStore(store))
		defer w2.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		s2, err := w2.Resume(context.Background(), "agent", p)
		require.NoError(t, err)
		<-s2.Context().Done()
		synctest.Wait() // the recorder writes the decision
		require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrIdleExceeded)
		decisions := ofKind(load(t, store, "agent"), watchdog.KindDecision)
		require.Len(t, decisions, 1)
		assert.WithinDuration(t, touched.Add(30*time.Second), decisions[0].OccurredAt, 100*time.Millisecond,
			"30 s after the last output, not 30 s after the resume (at +20 s)")
		mm, err := watchdog.Replay(load(t, store, "agent"))
		require.NoError(t, err)
		assert.Empty(t, mm)
		require.NoError(t, w2.Close(context.Background()))
	})
}

// A remote worker's checkpoint (RecordCheckpoint) is carried over by the
// Watchdog that resumes the window, and is refused with the window's end
// cause once the window has ended.
func TestARemoteWorkersCheckpointIsCarriedOverByTheResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}
		w1 := watchdog.New(watchdog.WithStore(store))
		defer w1.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		_, err := w1.Start(context.Background(), "agent", time.Now(), p)
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(20 * time.Second)
		worked := time.Now().UTC() // the worker's last output, which the owner never saw
		require.NoError(t, watchdog.RecordCheckpoint(context.Background(), store, watchdog.Checkpoint{
			SessionID: "agent",
			Evidence:  []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &worked, Counter: 7}},
		}))
		require.NoError(t, w1.Close(context.Background())) // the owner goes away

		time.Sleep(5 * time.Second)
		w2 := watchdog.New(watchdog.WithStore(store))
		defer w2.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		s2, err := w2.Resume(context.Background(), "agent", p)
		require.NoError(t, err)
		<-s2.Context().Done()
		synctest.Wait() // the recorder writes the decision
		evs := load(t, store, "agent")
		decisions := ofKind(evs, watchdog.KindDecision)
		require.Len(t, decisions, 1)
		assert.Equal(t, worked.Add(30*time.Second+time.Nanosecond), decisions[0].OccurredAt, "from the worker's evidence")
		assert.Equal(t, uint64(7), decisions[0].EvidenceSummary[0].Counter)
		mm, err := watchdog.Replay(evs)
		require.NoError(t, err)
		assert.Empty(t, mm)

		err = watchdog.RecordCheckpoint(context.Background(), store, watchdog.Checkpoint{
			SessionID: "agent",
			Evidence:  []watchdog.EvidenceEntry{{Channel: "stdout", LastAt: &worked, Counter: 8}},
		})
		require.ErrorIs(t, err, watchdog.ErrIdleExceeded, "the window has ended")
		err = watchdog.RecordCheckpoint(context.Background(), store, watchdog.Checkpoint{
			SessionID: "nobody", Evidence: []watchdog.EvidenceEntry{{Channel: "stdout"}}})
		require.ErrorIs(t, err, watchdog.ErrUnknownSession)
		require.NoError(t, w2.Close(context.Background()))
	})
}

// A remote worker's checkpoint is checked: a channel the session does not
// have, or twice, is refused; an instant ahead of this host's clock is
// recorded as now, so a worker whose clock runs an hour ahead does not
// keep a silent session alive for that hour.
func TestARemoteWorkersCheckpointIsCheckedAndItsFutureClamped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: 2 * time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}
		w1 := watchdog.New(watchdog.WithStore(store))
		defer w1.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		_, err := w1.Start(context.Background(), "agent", time.Now(), p)
		require.NoError(t, err)
		synctest.Wait()
		ahead := time.Now().Add(time.Hour)
		cp := func(ev ...watchdog.EvidenceEntry) error {
			return watchdog.RecordCheckpoint(context.Background(), store, watchdog.Checkpoint{SessionID: "agent", Evidence: ev})
		}
		require.ErrorIs(t, cp(watchdog.EvidenceEntry{Channel: "telepathy", Counter: 1}), watchdog.ErrInvalidArgument)
		require.ErrorIs(t, cp(watchdog.EvidenceEntry{Channel: "stdout", Counter: 1}, watchdog.EvidenceEntry{Channel: "stdout", Counter: 2}), watchdog.ErrInvalidArgument)
		require.NoError(t, cp(watchdog.EvidenceEntry{Channel: "stdout", LastAt: &ahead, Counter: 3}))
		recordedAt := time.Now().UTC()
		require.NoError(t, w1.Close(context.Background()))

		w2 := watchdog.New(watchdog.WithStore(store))
		defer w2.Close(context.Background()) //nolint:errcheck // closed below; this ends a failed test
		s2, err := w2.Resume(context.Background(), "agent", p)
		require.NoError(t, err)
		<-s2.Context().Done()
		require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrIdleExceeded)
		assert.WithinDuration(t, recordedAt.Add(30*time.Second), time.Now(), 100*time.Millisecond, "30 s after the checkpoint was recorded, not after the worker's clock")
		require.NoError(t, w2.Close(context.Background()))
	})
}

// A checkpoint records, besides the evidence, the calls in flight and the
// earliest stop, as the session's Snapshot foretells them; the end of a
// call makes another, with the earlier stop the idle rule then has.
func TestACheckpointRecordsTheCallsInFlightAndTheEarliestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 30 * time.Second, SettleChecks: 1}
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithCheckpoints(time.Second))
		defer w.Close(context.Background()) //nolint:errcheck // ends a failed test
		s, err := w.Start(context.Background(), "agent", time.Now(), p)
		require.NoError(t, err)
		h, err := watchdog.Begin(s.Context(), "Bash", watchdog.CallLimits{Cap: 10 * time.Minute})
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		in := s.Snapshot()
		require.NoError(t, h.End(nil))
		time.Sleep(time.Second)
		synctest.Wait()
		out := s.Snapshot()
		cps := ofKind(load(t, store, "agent"), watchdog.KindCheckpoint)
		require.Len(t, cps, 2, "one with the call in flight, one after it ended")
		assert.Equal(t, 1, cps[0].HandlersInFlight)
		require.Len(t, cps[0].CallsInFlight, 1)
		assert.Equal(t, "Bash", cps[0].CallsInFlight[0].Name)
		assert.Equal(t, "idle", cps[0].StopRule)
		assert.True(t, in.StopAt.Equal(cps[0].StopAt), "the stop the snapshot foretold: %v, recorded %v", in.StopAt, cps[0].StopAt)
		assert.Zero(t, cps[1].HandlersInFlight)
		assert.Empty(t, cps[1].CallsInFlight)
		assert.True(t, out.StopAt.Equal(cps[1].StopAt) && cps[1].StopAt.Before(cps[0].StopAt), "recorded %v after %v, foretold %v", cps[1].StopAt, cps[0].StopAt, out.StopAt)
	})
}
