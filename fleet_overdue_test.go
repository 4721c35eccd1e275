package watchdog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
)

// An adopter that takes over a window already past its deadline records
// what the docs say, in that order, every time: with the default policy,
// the resume (owner_lost) and the stop (owner_lost), never a verdict of the
// window's rules; with ContinueWhenOwnerLost, the resume and then the wall
// clock's decision and cancel. The adopter's log call between the two
// records sleeps (in the bubble: every other goroutine runs first), as an
// adopter descheduled there would, so that an order left to the
// scheduler's timing shows in every run.
func TestAnOverdueAdoptionRecordsTheDocumentedOrder(t *testing.T) {
	for _, cont := range []bool{false, true} {
		t.Run(fmt.Sprint("continue=", cont), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newLeaseStore()
				frozen := clock.NewMock()
				frozen.Set(time.Now())
				owner := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(frozen))
				const n = 8
				for i := range n {
					_, err := owner.Start(context.Background(), fmt.Sprint("agent-", i), frozen.Now(),
						watchdog.Policy{WallClock: 2 * time.Second, ContinueWhenOwnerLost: cont})
					require.NoError(t, err)
				}
				core, _ := observer.New(zapcore.InfoLevel)
				descheduled := zap.Hooks(func(e zapcore.Entry) error {
					if strings.Contains(e.Message, "adopted a window") {
						time.Sleep(time.Millisecond)
					}
					return nil
				})
				member := watchdog.New(watchdog.WithStore(store), watchdog.WithAdoption(), watchdog.WithLogger(zap.New(core, descheduled)))
				time.Sleep(watchdog.DefaultLeaseTTL + 2*time.Second) // adopted 4 s or more past the deadline
				synctest.Wait()
				want := []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindStop}
				if cont {
					want = []string{watchdog.KindStart, watchdog.KindResume, watchdog.KindDecision, watchdog.KindCancel}
				}
				for i := range n {
					evs := load(t, store.MemoryStore, fmt.Sprint("agent-", i))
					require.Equal(t, want, kinds(evs), "agent-%d", i)
					end := evs[len(evs)-1]
					if !cont {
						assert.Equal(t, watchdog.StopOwnerLost, end.Reason)
					} else {
						assert.Equal(t, "wall_clock", end.Rule)
					}
				}
				assert.Equal(t, int64(n), member.Stats().Adopted)
				require.NoError(t, owner.Close(context.Background()))
				require.NoError(t, member.Close(context.Background()))
			})
		})
	}
}
