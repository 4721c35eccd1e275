package watchdog_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testutil"
)

// The memory soak: WATCHDOG_SOAK=1000000 go test -run '^TestSoak' -v -timeout 60m . ./stores/file/
// drives that many start/stop cycles through a Watchdog on each store, with
// and without a retention, and logs the heap in use at the end
// (BENCHMARKS.md, Retention). Skipped without WATCHDOG_SOAK.
func TestSoakMemoryStoreHeap(t *testing.T) {
	n := testutil.SoakCycles(t)
	for _, c := range []struct {
		name    string
		r       watchdog.Retention
		windows bool
	}{
		{"sessions/unbounded", watchdog.Retention{}, false},
		{"sessions/ForgetAfter=10m", watchdog.Retention{ForgetAfter: 10 * time.Minute}, false},
		{"windows/KeepWindows=1", watchdog.Retention{KeepWindows: 1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := watchdog.NewMemoryStoreWithRetention(c.r)
			require.NoError(t, err)
			heap := testutil.Soak(t, store, n, c.windows)
			t.Logf("MemoryStore %s: %d cycles: heap in use %s (%.0f B a cycle)", c.name, n, testutil.MiB(heap), float64(heap)/float64(n))
		})
	}
}
