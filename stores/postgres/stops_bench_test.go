package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envStopBench, set to N, runs TestMeasureRemoteStopLatency over N stops
// (see BENCHMARKS.md).
const envStopBench = "WATCHDOG_PG_STOP_BENCH"

// TestMeasureRemoteStopLatency measures, across real processes, the time
// from RequestStop to (a) the session's context ending in the owner
// process, which happens after the stop is recorded (the store
// arbitrates: Stop waits for the database's answer), and (b) the answer
// read by WaitStop. One owner process runs N sessions; the test stops them
// one at a time and prints p50, p99 and max of each.
func TestMeasureRemoteStopLatency(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envStopBench))
	if n <= 0 {
		t.Skipf("set %s=N to measure N remote stops", envStopBench)
	}
	pool, table, _, owner := ownerProcess(t, n)
	var cancelled, answered []time.Duration
	for i := range n {
		id := fmt.Sprint("s", i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t0 := time.Now()
		r, err := RequestStop(ctx, pool, id, "measure", WithTable(table))
		require.NoError(t, err)
		a, err := WaitStop(ctx, pool, r.ID, WithTable(table))
		cancel()
		require.NoError(t, err)
		answered = append(answered, time.Since(t0))
		require.Equal(t, StopStopped, a.State, "%+v", a)
		f := strings.Fields(owner.expect("ENDED " + id + " "))
		ns, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		cancelled = append(cancelled, time.Unix(0, ns).Sub(t0))
	}
	owner.wait()
	for _, m := range []struct {
		what string
		d    []time.Duration
	}{{"request -> context cancelled in the owner", cancelled}, {"request -> answer read by WaitStop", answered}} {
		slices.Sort(m.d)
		p := func(q float64) time.Duration {
			return m.d[min(len(m.d)-1, int(q*float64(len(m.d))))].Round(10 * time.Microsecond)
		}
		fmt.Printf("%s: n=%d p50=%v p99=%v max=%v\n", m.what, len(m.d), p(0.50), p(0.99), m.d[len(m.d)-1].Round(10*time.Microsecond))
	}
}
