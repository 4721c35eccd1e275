// Package testutil holds the test helpers that the root package's tests and
// the stores' tests share: a mock clock at a fixed instant, a Watchdog
// closed with the test, stepping the clock from deadline to deadline, and
// reading a session's events.
package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// T0 is the fixed, recent instant every mock clock starts at.
var T0 = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

// NewMock returns a mock clock set to T0.
func NewMock() *clock.Mock {
	m := clock.NewMock()
	m.Set(T0)
	return m
}

// NewWatchdog returns a Watchdog on mock and store, closed at the end of
// the test.
func NewWatchdog(t *testing.T, mock *clock.Mock, store watchdog.EventStore, opts ...watchdog.Option) *watchdog.Watchdog {
	t.Helper()
	w := watchdog.New(append([]watchdog.Option{watchdog.WithClock(mock), watchdog.WithStore(store)}, opts...)...)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// Advance moves the mock clock by d, stopping and settling at every
// deadline on the way.
func Advance(t *testing.T, mock *clock.Mock, d time.Duration, ws ...*watchdog.Watchdog) {
	t.Helper()
	require.NoError(t, watchdogtest.Advance(context.Background(), mock, d, ws...))
}

// Load returns session id's events in s.
func Load(t *testing.T, s watchdog.EventStore, id string) []watchdog.Event {
	t.Helper()
	evs, err := s.Load(context.Background(), id)
	require.NoError(t, err)
	return evs
}

// Kinds returns the kinds of evs, in order.
func Kinds(evs []watchdog.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// CountKind counts the events of kind in evs.
func CountKind(evs []watchdog.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
