package stream_test

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

func newMock() *clock.Mock {
	m := clock.NewMock()
	m.Set(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	return m
}

func advanceMock(m *clock.Mock, d time.Duration, w *watchdog.Watchdog) error {
	return watchdogtest.Advance(context.Background(), m, d, w)
}

// opened is the open function of a stream the test has already made.
func opened(it stream.Iterator[chunk]) func(context.Context) stream.Iterator[chunk] {
	return func(context.Context) stream.Iterator[chunk] { return it }
}

// openedBody is the open function of a body the test has already made.
func openedBody(rc io.ReadCloser) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) { return rc, nil }
}

// sseProgress says whether a line of server-sent events is progress: a
// data line with content. Comments (": ping"), blank lines, other fields
// and empty data lines are not.
func sseProgress(line []byte) bool {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	return ok && len(bytes.TrimSpace(data)) > 0
}
