package testutil

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// SoakCycles returns the number of cycles the soak tests run: the
// environment's WATCHDOG_SOAK, or 0 (skip) when it is not set.
func SoakCycles(t *testing.T) int {
	t.Helper()
	v := os.Getenv("WATCHDOG_SOAK")
	if v == "" {
		t.Skip("set WATCHDOG_SOAK=<cycles> to run the memory soak")
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "WATCHDOG_SOAK")
	require.Positive(t, n, "WATCHDOG_SOAK")
	return n
}

// HeapInUse returns the heap in use after two garbage collections.
func HeapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Soak drives cycles sessions through a Watchdog on store, each started
// and stopped (a start and a stop event), on a mock clock that advances a
// second per cycle (100 s every 100 cycles), and returns the heap in use
// after it, once the Watchdog is closed (the store still held), minus the
// heap in use before.
// With windows, the cycles are windows of one session instead: a Resume
// and a Stop each.
func Soak(t *testing.T, store watchdog.EventStore, cycles int, windows bool) int64 {
	t.Helper()
	ctx := context.Background()
	before := HeapInUse()
	mock := NewMock()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store), watchdog.WithEventIDPrefix("soak"))
	p := watchdog.Policy{WallClock: time.Hour}
	for i := range cycles {
		var s *watchdog.Session
		var err error
		switch {
		case !windows:
			s, err = w.Start(ctx, "session-"+strconv.Itoa(i), mock.Now(), p)
		case i == 0:
			s, err = w.Start(ctx, "session", mock.Now(), p)
		default:
			s, err = w.Resume(ctx, "session", p)
		}
		require.NoError(t, err)
		require.NoError(t, s.Stop())
		if i%100 == 99 {
			// A mock's Add sleeps a millisecond (to let timers run): the
			// clock moves by 100 s every 100 cycles.
			mock.Add(100 * time.Second)
			require.NoError(t, w.Check(ctx))
		}
	}
	require.NoError(t, w.Close(ctx))
	after := HeapInUse()
	runtime.KeepAlive(store)
	return int64(after) - int64(before)
}

// MiB formats n bytes in MiB.
func MiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
