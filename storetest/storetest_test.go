package storetest_test

import (
	"testing"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) watchdog.EventStore { return watchdog.NewMemoryStore() })
}
