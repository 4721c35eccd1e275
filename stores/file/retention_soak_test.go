package file_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testutil"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// The file store's memory soak (see the root package's TestSoakMemoryStoreHeap):
// heap in use and file size after WATCHDOG_SOAK start/stop cycles.
func TestSoakFileStoreHeap(t *testing.T) {
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
			path := filepath.Join(t.TempDir(), "events.jsonl")
			store, err := file.Open(path, file.WithSync(file.SyncOnClose), file.WithRetention(c.r))
			require.NoError(t, err)
			heap := testutil.Soak(t, store, n, c.windows)
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, store.Close())
			t.Logf("file store %s: %d cycles: heap in use %s (%.0f B a cycle), file %s", c.name, n, testutil.MiB(heap), float64(heap)/float64(n), testutil.MiB(st.Size()))
		})
	}
}
