package watchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessionwatchdog/watchdog"
)

// A Clock passed to Follow that panics crashes nothing: Follow returns to
// its caller (the window's backstop is armed on the Clock's fallback
// reading), the panic is logged at error level, and stopping the follower
// ends its goroutine and the subscription (synctest.Test fails otherwise).
func TestAPanickingClockCrashesNothingInFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := newMock()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(mock))
		_, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		require.NoError(t, w.Check(context.Background()))

		broken := &faultyClock{Mock: mock}
		broken.broken.Store(true)
		core, logs := observer.New(zapcore.ErrorLevel)
		var ctx context.Context
		var stop context.CancelFunc
		require.NotPanics(t, func() {
			ctx, stop, err = watchdog.Follow(context.Background(), store, "s", watchdog.WithClock(broken), watchdog.WithLogger(zap.New(core)))
		})
		require.NoError(t, err)
		assert.NotZero(t, logs.FilterMessageSnippet("the Clock's").Len(), "the panic is logged")
		stop()
		<-ctx.Done()
		require.NoError(t, w.Close(context.Background()))
	})
}

// Follow's goroutine reads the Clock when a window's start record arrives
// after Follow: a panicking Clock there crashes nothing either, and the
// follower still ends with the verdict when the cancel is recorded.
func TestAPanickingClockCrashesNothingOnFollowsGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := newMock()
		store := watchdog.NewMemoryStore()
		broken := &faultyClock{Mock: mock}
		broken.broken.Store(true)
		ctx, stop, err := watchdog.Follow(context.Background(), store, "s", watchdog.WithClock(broken))
		require.NoError(t, err)
		defer stop()

		w := watchdog.New(watchdog.WithStore(store), watchdog.WithClock(mock))
		_, err = w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		require.NoError(t, w.Check(context.Background()))
		synctest.Wait() // the start record reached the follower, whose Clock panicked
		require.NoError(t, ctx.Err())

		advance(t, mock, time.Minute+1, w)
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), watchdog.ErrWallClockExceeded)
		require.NoError(t, w.Close(context.Background()))
	})
}

// panickingSubscriber is a store whose Subscribe or Load panics.
type panickingSubscriber struct {
	*watchdog.MemoryStore
	in string
}

func (p panickingSubscriber) Subscribe(ctx context.Context, id string) (<-chan watchdog.Event, error) {
	if p.in == "Subscribe" {
		panic("store: Subscribe")
	}
	return p.MemoryStore.Subscribe(ctx, id)
}

func (p panickingSubscriber) Load(ctx context.Context, id string) ([]watchdog.Event, error) {
	if p.in == "Load" {
		panic("store: Load")
	}
	return p.MemoryStore.Load(ctx, id)
}

// A store whose Subscribe or Load panics makes Follow return an error that
// names it, and leaves no goroutine behind.
func TestAStoreThatPanicsInFollowIsAnError(t *testing.T) {
	for _, in := range []string{"Subscribe", "Load"} {
		t.Run(in, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, _, err := watchdog.Follow(context.Background(), panickingSubscriber{watchdog.NewMemoryStore(), in}, "s")
				require.ErrorContains(t, err, "the store's "+in+" panicked")
			})
		})
	}
}
