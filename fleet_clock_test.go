package watchdog_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// offsetClock is the real clock (a synctest bubble's fake time) read d
// ahead: a member whose clock is off the store's.
type offsetClock struct {
	clock.Clock
	d time.Duration
}

func (c offsetClock) Now() time.Time { return c.Clock.Now().Add(c.d) }

// A window adopted by a member whose clock is 30 s ahead of the store's (or
// behind it), or opened by an owner whose clock was, is decided at the same
// instant and with the same elapsed time as with clocks that agree: every
// member records on the store's clock (read at each heartbeat) and times an
// adopted window from the recorded instants on it. The store's clock is the
// bubble's time; each case runs in a bubble of its own, from the same
// instant.
func TestASkewedMemberDecidesAnAdoptedWindowAsAnUnskewedOne(t *testing.T) {
	type outcome struct {
		start, fired time.Duration // recorded, from t0
		recorded     time.Duration // when the store recorded the cancel, from t0
		elapsed      float64
		kinds        []string
	}
	run := func(t *testing.T, ownerSkew, memberSkew time.Duration) (o outcome) {
		synctest.Test(t, func(t *testing.T) {
			store := newLeaseStore()
			t0 := time.Now()
			frozen := clock.NewMock() // the owner, paused after its first heartbeat
			frozen.Set(t0.Add(ownerSkew))
			owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
			_, err := owner.Start(context.Background(), "agent", frozen.Now(),
				watchdog.Policy{WallClock: 20 * time.Second, ContinueWhenOwnerLost: true})
			require.NoError(t, err)
			member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption(),
				watchdog.WithClock(offsetClock{clock.New(), memberSkew}))
			time.Sleep(time.Minute)
			synctest.Wait()
			evs := load(t, store.MemoryStore, "agent")
			o.kinds = kinds(evs)
			require.Len(t, evs, 4, "%v", o.kinds)
			o.start, o.fired, o.elapsed = evs[0].WindowStartedAt.Sub(t0), evs[3].OccurredAt.Sub(t0), evs[3].ElapsedSeconds
			store.lmu.Lock()
			o.recorded = store.at[evs[3].ID].Sub(t0)
			store.lmu.Unlock()
			assert.True(t, evs[0].WindowStartedAt.Equal(evs[3].WindowStartedAt), "the adopter keeps the recorded start")
			mm, err := watchdog.Replay(evs)
			require.NoError(t, err)
			assert.Empty(t, mm)
			require.NoError(t, owner.Close(context.Background()))
			require.NoError(t, member.Close(context.Background()))
		})
		return o
	}
	want := run(t, 0, 0)
	require.Equal(t, []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}, want.kinds)
	assert.Equal(t, 20*time.Second+time.Nanosecond, want.fired-want.start, "fired at the window's deadline")
	assert.Equal(t, want.fired, want.recorded, "and recorded then")
	for _, c := range []struct{ owner, member time.Duration }{
		{0, 30 * time.Second}, {0, -30 * time.Second}, {30 * time.Second, 0}, {-30 * time.Second, 30 * time.Second},
	} {
		t.Run(fmt.Sprintf("owner %v member %v", c.owner, c.member), func(t *testing.T) {
			got := run(t, c.owner, c.member)
			assert.Equal(t, want, got, "the same decision as with clocks that agree")
		})
	}
}
