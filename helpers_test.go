package watchdog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// t0 is the fixed, recent instant every mock clock starts at.
var t0 = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

func newMock() *clock.Mock {
	m := clock.NewMock()
	m.Set(t0)
	return m
}

// newWatchdog returns a Watchdog on mock and store, closed at the end of the test.
func newWatchdog(t *testing.T, mock *clock.Mock, store watchdog.EventStore, opts ...watchdog.Option) *watchdog.Watchdog {
	t.Helper()
	w := watchdog.New(append([]watchdog.Option{watchdog.WithClock(mock), watchdog.WithStore(store)}, opts...)...)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// advance moves the mock clock, stopping and settling at every deadline.
func advance(t *testing.T, mock *clock.Mock, d time.Duration, ws ...*watchdog.Watchdog) {
	t.Helper()
	require.NoError(t, watchdogtest.Advance(context.Background(), mock, d, ws...))
}

func load(t *testing.T, s watchdog.EventStore, id string) []watchdog.Event {
	t.Helper()
	evs, err := s.Load(context.Background(), id)
	require.NoError(t, err)
	return evs
}

func kinds(evs []watchdog.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func countKind(evs []watchdog.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

var errStoreDown = errors.New("store down")

// faultyStore wraps a MemoryStore: it fails the next failN Appends, and
// blocks every Append while gate is closed.
type faultyStore struct {
	*watchdog.MemoryStore
	mu      sync.Mutex
	failN   int
	fails   int
	gate    chan struct{} // nil: open
	entered chan struct{} // receives once per blocked Append, if non-nil
}

func newFaultyStore(failN int) *faultyStore {
	return &faultyStore{MemoryStore: watchdog.NewMemoryStore(), failN: failN}
}

func (f *faultyStore) Append(ctx context.Context, evs ...watchdog.Event) error {
	f.mu.Lock()
	gate, entered := f.gate, f.entered
	fail := f.failN > 0
	if fail {
		f.failN--
		f.fails++
	}
	f.mu.Unlock()
	if gate != nil {
		if entered != nil {
			select {
			case entered <- struct{}{}:
			default:
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errStoreDown
	}
	return f.MemoryStore.Append(ctx, evs...)
}

func (f *faultyStore) setFail(n int) {
	f.mu.Lock()
	f.failN = n
	f.mu.Unlock()
}
