package watchdog_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// A worker resumed after its orchestrator restarted gets back the last
// progress and payload it saved, read from the store: it continues where
// it left, and the resume record carries them on.
func TestResumeGivesBackTheLastSavedProgressAfterARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w1 := watchdog.New(watchdog.WithStore(store))
		s, err := w1.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		p0, pl0 := s.LastProgress()
		assert.Zero(t, p0)
		assert.Nil(t, pl0)
		require.NoError(t, s.SaveProgress(3, json.RawMessage(`{"step":"tests"}`)))
		require.NoError(t, s.SaveProgress(7, json.RawMessage(`{"step":"lint","files":["a.go"]}`)))
		p, pl := s.LastProgress()
		assert.Equal(t, uint64(7), p)
		assert.JSONEq(t, `{"step":"lint","files":["a.go"]}`, string(pl))
		require.NoError(t, w1.Close(ctx)) // the orchestrator goes away; the window stays open

		w2 := watchdog.New(watchdog.WithStore(store))
		r, err := w2.Resume(ctx, "agent", watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, 1, r.Window(), "the open window continues")
		p, pl = r.LastProgress()
		assert.Equal(t, uint64(7), p)
		assert.JSONEq(t, `{"step":"lint","files":["a.go"]}`, string(pl))

		// After the window ends, a resume opens window 2 with the progress.
		require.NoError(t, r.StopBy("ops", "redeploy"))
		r2, err := w2.Resume(ctx, "agent", watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, 2, r2.Window())
		p, _ = r2.LastProgress()
		assert.Equal(t, uint64(7), p)
		require.NoError(t, w2.Check(ctx))
		evs := load(t, store, "agent")
		last := evs[len(evs)-1]
		require.Equal(t, watchdog.KindResume, last.Kind)
		assert.Equal(t, uint64(7), last.ProgressValue, "the resume record carries the progress on")
		assert.JSONEq(t, `{"step":"lint","files":["a.go"]}`, string(last.Payload))
		require.NoError(t, w2.Close(ctx))
	})
}

// A payload that is too long or not JSON is refused with a clear error and
// records nothing; the caller's buffer may be reused after the call; a
// save after the window ended records nothing and returns the end cause.
func TestSaveProgressRefusesBadPayloadsAndEndedWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Second})
		require.NoError(t, err)
		err = s.SaveProgress(1, json.RawMessage(`{"a":`))
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "not valid JSON")
		err = s.SaveProgress(1, json.RawMessage(`"`+strings.Repeat("x", watchdog.MaxPayload)+`"`))
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "MaxPayload")
		var nilS *watchdog.Session
		require.ErrorIs(t, nilS.SaveProgress(1, nil), watchdog.ErrInvalidArgument)

		buf := []byte(`{"n":1}`)
		require.NoError(t, s.SaveProgress(1, buf))
		copy(buf, `{"n":9}`)
		_, pl := s.LastProgress()
		assert.JSONEq(t, `{"n":1}`, string(pl), "SaveProgress keeps its own copy")

		<-s.Context().Done()
		synctest.Wait()
		require.ErrorIs(t, s.SaveProgress(2, nil), watchdog.ErrWallClockExceeded)
		assert.Equal(t, []string{watchdog.KindStart, watchdog.KindCheckpoint, watchdog.KindDecision, watchdog.KindCancel}, kinds(load(t, store, "agent")))
		require.NoError(t, w.Close(ctx))
	})
}

// disorderedStore returns a session's events in another order than they
// were appended, as a faulty store might.
type disorderedStore struct {
	*watchdog.MemoryStore
	reorder func([]watchdog.Event)
}

func (d *disorderedStore) Load(ctx context.Context, id string) ([]watchdog.Event, error) {
	evs, err := d.MemoryStore.Load(ctx, id)
	d.reorder(evs)
	return evs, err
}

// Resume orders the store's events by their Seq: a store that returns
// them reversed or shuffled neither takes the progress back (3 to 1) nor
// moves the window. Before the fix the last event in the store's order won.
func TestResumeDoesNotTrustTheStoresEventOrder(t *testing.T) {
	for name, reorder := range map[string]func([]watchdog.Event){
		"reversed": slices.Reverse[[]watchdog.Event],
		"shuffled": func(evs []watchdog.Event) {
			r := rand.New(rand.NewPCG(1, 2))
			for evs[len(evs)-1].ProgressValue == 3 { // the progress saved last is not last
				r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := watchdog.NewMemoryStore()
				w1 := watchdog.New(watchdog.WithStore(store))
				p := watchdog.Policy{WallClock: time.Hour}
				s, err := w1.Start(ctx, "agent", time.Now(), p)
				require.NoError(t, err)
				for i := range uint64(3) {
					time.Sleep(time.Minute)
					require.NoError(t, s.SaveProgress(i+1, nil))
				}
				deadline := s.Deadline()
				require.NoError(t, w1.Close(ctx))

				w2 := watchdog.New(watchdog.WithStore(&disorderedStore{store, reorder}))
				defer w2.Close(ctx)
				r, err := w2.Resume(ctx, "agent", p)
				require.NoError(t, err)
				n, _ := r.LastProgress()
				assert.Equal(t, uint64(3), n, "the progress saved last")
				assert.Equal(t, 1, r.Window())
				assert.Equal(t, deadline, r.Deadline())
			})
		})
	}
}

// Follow and RecordCheckpoint order the store's events by their Seq, as
// Resume does. With a store that returns them reversed: a follower of a
// window whose resume moved the budget (SupervisedOnly, 30 s unsupervised)
// keeps the resume's deadline, not the start's (before: ErrSupervisorLost
// 30 s early); a checkpoint naming a channel the session's policy lacks is
// refused (before: the reversed log's first event, an earlier checkpoint
// without the policy, let it through).
func TestFollowAndRecordCheckpointDoNotTrustTheStoresEventOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		p := watchdog.Policy{WallClock: time.Minute, SupervisedOnly: true, Channels: []string{"browser"}}
		w1 := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		_, err := w1.Start(ctx, "s", start, p)
		require.NoError(t, err)
		require.NoError(t, w1.Close(ctx)) // the supervisor goes away
		time.Sleep(30 * time.Second)
		w2 := watchdog.New(watchdog.WithStore(store))
		s, err := w2.Resume(ctx, "s", p)
		require.NoError(t, err)
		deadline := s.Deadline()
		require.Equal(t, start.Add(90*time.Second).UTC(), deadline, "the budget counts supervised time")
		require.NoError(t, w2.Close(ctx)) // gone again, the window open
		browser := []watchdog.EvidenceEntry{{Channel: "browser", Counter: 1}}
		require.NoError(t, watchdog.RecordCheckpoint(ctx, store, watchdog.Checkpoint{SessionID: "s", Evidence: browser}))

		reversed := &disorderedStore{store, slices.Reverse[[]watchdog.Event]}
		bogus := []watchdog.EvidenceEntry{{Channel: "bogus", Counter: 1}}
		err = watchdog.RecordCheckpoint(ctx, reversed, watchdog.Checkpoint{SessionID: "s", Evidence: bogus})
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.ErrorContains(t, err, `channel "bogus" is not one of the session's`)

		fctx, stop, err := watchdog.Follow(ctx, reversed, "s")
		require.NoError(t, err)
		defer stop()
		time.Sleep(time.Until(deadline.Add(watchdog.FollowGrace)) - time.Nanosecond)
		synctest.Wait()
		require.NoError(t, fctx.Err(), "the backstop counts from the resume's deadline")
		<-fctx.Done()
		assert.Equal(t, deadline.Add(watchdog.FollowGrace), time.Now().UTC())
		require.ErrorIs(t, context.Cause(fctx), watchdog.ErrSupervisorLost)
	})
}
