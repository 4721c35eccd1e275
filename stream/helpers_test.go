package stream_test

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
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
