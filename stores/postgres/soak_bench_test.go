package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sessionwatchdog/watchdog"
)

// BenchmarkSoakRecorderLag runs 5,000 sessions on one Watchdog writing to
// PostgreSQL for 15 s (WATCHDOG_SOAK_SECONDS to change it) and reports the
// recorder's lag: Stats.OldestQueued, sampled every 50 ms (p50, p99, max),
// and the events recorded per second. "batched" also reports what the
// fleet's locking cost: the "deadlock detected" lines the server logged
// meanwhile (when WATCHDOG_PG_LOG names its log, as scripts/with-postgres
// sets it), the events whose append failed with a deadlock (40P01) and all
// whose append failed for a reason the recorder retries, the heartbeats
// that failed (Stats.LeaseFailures) or deadlocked, and the slowest
// heartbeat and the slowest read of the database's clock (Store.Now, which
// the Watchdog calls after each heartbeat). Half the sessions go idle (an idle
// window of 1 s, three settle checks 500 ms apart) and half report work on
// stdout every 300 ms under a wall-clock budget of 3 to 8 s; each session
// is resumed as soon as its window ends. "per-event" hides AppendEach (one
// transaction per event); "batched" is the Store itself. Run it on a
// server that pays for durability:
//
//	WATCHDOG_PG_DURABLE=1 ../../scripts/with-postgres go test -run '^$' -bench SoakRecorderLag -benchtime 1x -timeout 10m
func BenchmarkSoakRecorderLag(b *testing.B) {
	pool := testPool(b)
	const sessions = 5000
	d := 15 * time.Second
	if v, err := strconv.Atoi(os.Getenv("WATCHDOG_SOAK_SECONDS")); err == nil && v > 0 {
		d = time.Duration(v) * time.Second
	}
	for _, mode := range []string{"per-event", "batched"} {
		b.Run(mode, func(b *testing.B) {
			counted := &countingStore{Store: newStore(b, pool, WithTable(uniqueTable(b)))}
			var store watchdog.EventStore = counted
			if mode == "per-event" {
				store = struct{ watchdog.EventStore }{counted.Store}
			}
			deadlocksBefore := loggedDeadlocks(b)
			var recorded atomic.Int64
			w := watchdog.New(watchdog.WithStore(store),
				watchdog.WithObserver(watchdog.Observer{OnEvent: func(watchdog.Event) { recorded.Add(1) }}))
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var wg sync.WaitGroup
			for i := range sessions {
				p := watchdog.Policy{WallClock: time.Duration(3000+i%5000) * time.Millisecond}
				busy := i%2 == 0
				if !busy {
					p = watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Second, SettleChecks: 3, SettleInterval: 500 * time.Millisecond}
				}
				id := fmt.Sprintf("soak-%d", i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := w.Start(ctx, id, time.Now(), p)
					for err == nil {
						runWindow(ctx, s, busy)
						if ctx.Err() != nil {
							_ = s.Stop()
							return
						}
						s, err = w.Resume(ctx, id, p)
					}
					if ctx.Err() == nil {
						b.Errorf("session %s: %v", id, err)
					}
				}()
			}
			var lags []time.Duration
			tick := time.NewTicker(50 * time.Millisecond)
			start := time.Now()
			for ctx.Err() == nil {
				select {
				case <-tick.C:
					lags = append(lags, w.Stats().OldestQueued)
				case <-ctx.Done():
				}
			}
			tick.Stop()
			n := recorded.Load()
			elapsed := time.Since(start)
			wg.Wait()
			_ = w.Close(context.Background())
			slices.Sort(lags)
			at := func(q float64) float64 { return float64(lags[int(q*float64(len(lags)-1))]) / float64(time.Millisecond) }
			b.ReportMetric(at(0.5), "lag-p50-ms")
			b.ReportMetric(at(0.99), "lag-p99-ms")
			b.ReportMetric(at(1), "lag-max-ms")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
			if mode == "batched" {
				st := w.Stats()
				if deadlocksBefore >= 0 {
					b.ReportMetric(float64(loggedDeadlocks(b)-deadlocksBefore), "deadlocks-in-log")
				}
				b.ReportMetric(float64(counted.deadlocked.Load()), "append-deadlocks")
				b.ReportMetric(float64(counted.retried.Load()), "appends-retried")
				b.ReportMetric(float64(st.LeaseRenewals), "heartbeats")
				b.ReportMetric(float64(st.LeaseFailures), "heartbeat-failures")
				b.ReportMetric(float64(counted.heartbeatDeadlocks.Load()), "heartbeat-deadlocks")
				b.ReportMetric(float64(counted.slowestHeartbeat.Load())/float64(time.Millisecond), "heartbeat-max-ms")
				b.ReportMetric(float64(counted.slowestNow.Load())/float64(time.Millisecond), "now-max-ms")
			}
		})
	}
}

// countingStore is a Store that counts, for the soak, the events whose
// append failed for a reason the recorder retries (and of those, the
// deadlocks) and the slowest heartbeat.
type countingStore struct {
	*Store
	retried, deadlocked atomic.Int64
	heartbeatDeadlocks  atomic.Int64
	slowestHeartbeat    atomic.Int64 // nanoseconds
	slowestNow          atomic.Int64 // nanoseconds: Now, which a Watchdog calls after each heartbeat
}

func keepMax(m *atomic.Int64, d int64) {
	for {
		old := m.Load()
		if d <= old || m.CompareAndSwap(old, d) {
			return
		}
	}
}

func (c *countingStore) Now(ctx context.Context) (time.Time, error) {
	start := time.Now()
	now, err := c.Store.Now(ctx)
	keepMax(&c.slowestNow, int64(time.Since(start)))
	return now, err
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

func (c *countingStore) AppendEach(ctx context.Context, events []watchdog.Event) []error {
	errs := c.Store.AppendEach(ctx, events)
	for _, err := range errs {
		switch {
		case err == nil, errors.Is(err, watchdog.ErrAlreadyDecided), errors.Is(err, watchdog.ErrAlreadyWatched),
			errors.Is(err, watchdog.ErrInvalidEvent), errors.Is(err, watchdog.ErrClosed), ctx.Err() != nil:
		case isDeadlock(err):
			c.deadlocked.Add(1)
			c.retried.Add(1)
		default:
			c.retried.Add(1)
		}
	}
	return errs
}

func (c *countingStore) Heartbeat(ctx context.Context, owner string, ttl time.Duration, cps []watchdog.Checkpoint) error {
	start := time.Now()
	err := c.Store.Heartbeat(ctx, owner, ttl, cps)
	d := int64(time.Since(start))
	if isDeadlock(err) {
		c.heartbeatDeadlocks.Add(1)
	}
	keepMax(&c.slowestHeartbeat, d)
	return err
}

// loggedDeadlocks counts the "deadlock detected" lines of the server log
// that WATCHDOG_PG_LOG names, or returns -1 when it names none.
func loggedDeadlocks(b *testing.B) int {
	b.Helper()
	path := os.Getenv("WATCHDOG_PG_LOG")
	if path == "" {
		return -1
	}
	log, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("WATCHDOG_PG_LOG: %v", err)
	}
	return bytes.Count(log, []byte("deadlock detected"))
}

// runWindow keeps s busy (a stdout touch every 300 ms) or idle until its
// window ends or ctx does.
func runWindow(ctx context.Context, s *watchdog.Session, busy bool) {
	if !busy {
		select {
		case <-s.Context().Done():
		case <-ctx.Done():
		}
		return
	}
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.Context().Done():
			return
		case <-ctx.Done():
			return
		case <-t.C:
			s.Touch(watchdog.ChannelStdout)
		}
	}
}
