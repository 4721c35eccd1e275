package file_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// The root package's test helpers that the Store's tests use, copied: an
// external test package of another directory cannot import them.

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
