package storetest_test

import (
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) watchdog.EventStore { return watchdog.NewMemoryStore() })
}

// The suite holds with a retention that keeps eight ended windows per
// session and forgets ended sessions an hour after their end: no subtest's
// session reaches either bound (RacingTerminals has 8 windows; its events
// occur milliseconds apart), so the store must behave as one that keeps
// all. (With fewer windows kept, RacingTerminals still gets exactly one
// winner per window, but its Load no longer shows the forgotten ones.)
func TestMemoryStoreConformanceWithRetention(t *testing.T) {
	storetest.Run(t, func(t *testing.T) watchdog.EventStore {
		m, err := watchdog.NewMemoryStoreWithRetention(watchdog.Retention{KeepWindows: 8, ForgetAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}
