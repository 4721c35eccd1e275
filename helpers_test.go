package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testutil"
)

// The helpers shared with the stores' tests (internal/testutil).
var (
	t0          = testutil.T0
	newMock     = testutil.NewMock
	newWatchdog = testutil.NewWatchdog
	advance     = testutil.Advance
	load        = testutil.Load
	kinds       = testutil.Kinds
	countKind   = testutil.CountKind
)

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

// jsonField is the field key of e's JSON encoding (nil when absent).
func jsonField(t testing.TB, e watchdog.Event, key string) any {
	t.Helper()
	b, err := json.Marshal(e)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m[key]
}

// callWith runs fn as the call name under l: Begin, then Run (the function
// form with idle limits, which CallWith was).
func callWith(ctx context.Context, name string, l watchdog.CallLimits, fn func(context.Context) error) error {
	h, err := watchdog.Begin(ctx, name, l)
	if err != nil {
		return err
	}
	return h.Run(fn)
}
