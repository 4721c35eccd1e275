package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// The default real clock works unchanged inside a testing/synctest bubble:
// the bubble's fake time drives the scheduler's timer, and synctest.Wait is
// the barrier. synctest.Test also fails if any goroutine the Watchdog started
// outlives Close.
func TestTheRealClockWorksInsideASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store)) // default clock: clock.New()
		start := time.Now()
		s, err := w.Start(context.Background(), "bubble", start, watchdog.Policy{WallClock: 10 * time.Second})
		require.NoError(t, err)

		<-s.Context().Done() // fake time jumps straight to the fire
		assert.Equal(t, 10*time.Second+time.Nanosecond, time.Since(start))
		require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

		synctest.Wait() // the recorder has appended the cancel
		evs, err := store.Load(context.Background(), "bubble")
		require.NoError(t, err)
		require.Equal(t, []string{watchdog.KindStart, watchdog.KindDecision, watchdog.KindCancel}, kinds(evs))
		assert.True(t, evs[2].FiredAt.Equal(start.Add(10*time.Second+time.Nanosecond)))

		require.NoError(t, w.Close(context.Background()))
	})
}

// Follow's goroutine and the store's subscription end with the follower.
func TestFollowLeavesNoGoroutineBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		synctest.Wait()
		ctx, stop, err := watchdog.Follow(context.Background(), store, "s")
		require.NoError(t, err)
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), watchdog.ErrWallClockExceeded)
		stop()
		require.NoError(t, w.Close(context.Background()))
	})
}

// A follower whose supervisor is gone (its process died: the window stays
// open in the store, with no terminal event ever coming) does not run on
// forever: its context ends FollowGrace after the window's recorded
// deadline, with cause ErrSupervisorLost, and not a moment before.
func TestAFollowerWhoseSupervisorIsGoneEndsAfterTheDeadlineAndGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		_, err := w.Start(context.Background(), "s", start, watchdog.Policy{WallClock: 10 * time.Second, SessionCeiling: time.Hour})
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, w.Close(context.Background())) // the supervisor goes away; the window stays open

		ctx, stop, err := watchdog.Follow(context.Background(), store, "s")
		require.NoError(t, err)
		defer stop()
		time.Sleep(10*time.Second + watchdog.FollowGrace - time.Nanosecond)
		synctest.Wait()
		require.NoError(t, ctx.Err(), "the grace has not run out")
		<-ctx.Done()
		assert.Equal(t, 10*time.Second+watchdog.FollowGrace, time.Since(start))
		require.ErrorIs(t, context.Cause(ctx), watchdog.ErrSupervisorLost)
		assert.ErrorContains(t, context.Cause(ctx), `session "s" window 1`)

		late, stopLate, err := watchdog.Follow(context.Background(), store, "s")
		require.NoError(t, err)
		defer stopLate()
		require.ErrorIs(t, context.Cause(late), watchdog.ErrSupervisorLost, "a follower that comes after the grace ends at once")
	})
}

// A follower that starts before the supervisor's Start gets its backstop
// from the start record when it arrives.
func TestAFollowerThatCameFirstGetsItsBackstopFromTheStartRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		ctx, stop, err := watchdog.Follow(context.Background(), store, "s")
		require.NoError(t, err)
		defer stop()
		w := watchdog.New(watchdog.WithStore(store))
		start := time.Now()
		_, err = w.Start(context.Background(), "s", start, watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, w.Close(context.Background())) // the supervisor dies
		<-ctx.Done()
		assert.Equal(t, time.Minute+watchdog.FollowGrace, time.Since(start))
		require.ErrorIs(t, context.Cause(ctx), watchdog.ErrSupervisorLost)
	})
}

// A supervisor whose action fails and is retried past the deadline and
// grace is at work: each record of the window it writes moves the backstop,
// and the follower ends with the verdict, not ErrSupervisorLost.
func TestAFollowerWaitsForASupervisorRetryingItsAction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		failures := 3
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithAction(
			func(ctx context.Context, s *watchdog.Session, v *watchdog.VerdictError) error {
				if failures > 0 {
					failures--
					time.Sleep(25 * time.Second) // a slow drain that then fails
					return fmt.Errorf("drain failed")
				}
				return nil
			}))
		defer w.Close(context.Background())
		_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		synctest.Wait()
		ctx, stop, err := watchdog.Follow(context.Background(), store, "s")
		require.NoError(t, err)
		defer stop()
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), watchdog.ErrWallClockExceeded, "cause: %v", context.Cause(ctx))
	})
}

// The backstop counts from the rules the recorded policy acts on: the
// session ceiling when it comes first, nothing when the absolute rules only
// advise.
func TestTheFollowersBackstopFollowsTheRecordedPolicy(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    watchdog.Policy
		want time.Duration // 0: no backstop
	}{
		{"ceiling first", watchdog.Policy{WallClock: time.Hour, SessionCeiling: 20 * time.Second}, 20*time.Second + watchdog.FollowGrace},
		{"shadow only", watchdog.Policy{WallClock: 20 * time.Second, Mode: watchdog.ModeShadow}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := watchdog.NewMemoryStore()
				w := watchdog.New(watchdog.WithStore(store))
				start := time.Now()
				_, err := w.Start(context.Background(), "s", start, tt.p)
				require.NoError(t, err)
				synctest.Wait()
				require.NoError(t, w.Close(context.Background()))
				ctx, stop, err := watchdog.Follow(context.Background(), store, "s")
				require.NoError(t, err)
				defer stop()
				if tt.want == 0 {
					time.Sleep(24 * time.Hour)
					synctest.Wait()
					require.NoError(t, ctx.Err(), "no backstop when no rule acts")
					return
				}
				<-ctx.Done()
				assert.Equal(t, tt.want, time.Since(start))
				require.ErrorIs(t, context.Cause(ctx), watchdog.ErrSupervisorLost)
			})
		})
	}
}

// A deadline earlier than the one the scheduler sleeps towards wakes it,
// even when it is pushed while a pass is running: every session fires at
// exactly its deadline. Sessions are started from several goroutines, each
// one due before the ones already watched, while earlier ones fire.
func TestEveryDeadlineFiresOnTimeWhenEarlierOnesArriveDuringPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New(watchdog.WithStore(watchdog.NewMemoryStore()))
		start := time.Now()
		const perGoroutine = 50
		sessions := make(chan *watchdog.Session, 4*perGoroutine)
		done := make(chan struct{})
		for g := range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range perGoroutine {
					// Budgets shrink as time passes, so each new deadline is
					// earlier than those already armed.
					budget := time.Duration(1000-20*i-g) * time.Millisecond
					s, err := w.Start(context.Background(), fmt.Sprintf("s%d-%d", g, i), time.Now(), watchdog.Policy{WallClock: budget})
					if err != nil {
						t.Error(err)
						return
					}
					sessions <- s
					time.Sleep(time.Duration(g+1) * time.Millisecond)
				}
			}()
		}
		for range 4 {
			<-done
		}
		close(sessions)
		for s := range sessions {
			<-s.Context().Done()
			var v *watchdog.VerdictError
			require.ErrorAs(t, context.Cause(s.Context()), &v)
			assert.Equal(t, s.Deadline().Add(time.Nanosecond), v.FiredAt, "%s fired late", s.ID())
		}
		assert.Less(t, time.Since(start), 2*time.Second)
		require.NoError(t, w.Close(context.Background()))
	})
}
