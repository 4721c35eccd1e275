package watchdog_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/record"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// benchAppend measures Append throughput: batch events per call, reported as
// events/s. Every event is a new non-terminal event of one of 16 sessions.
// (stores/file's BenchmarkFileStoreAppend uses the same loop.)
func benchAppend(b *testing.B, s watchdog.EventStore, batch int) {
	b.Helper()
	ctx := context.Background()
	evs := make([]watchdog.Event, batch)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range evs {
			n++
			evs[i] = watchdog.Event{
				ID: fmt.Sprintf("b%d", n), AggregateID: fmt.Sprintf("s%d", n%16),
				Kind: watchdog.KindResume, Window: 1, SessionStartedAt: t0, WindowStartedAt: t0,
				OccurredAt: t0.Add(time.Second), ElapsedSeconds: 1, ConfiguredBudgetSeconds: 10,
			}
		}
		if err := s.Append(ctx, evs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// go test -run '^$' -bench 'Append' -benchmem . ./stores/file
func BenchmarkMemoryStoreAppend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchAppend(b, watchdog.NewMemoryStore(), batch)
		})
	}
}

// fireTemplates returns the events of 1,000 sessions of a real Watchdog,
// each started with a 1 s wall-clock budget on a mock clock that is then
// advanced past it: its start, decision and cancel events.
func fireTemplates(tb testing.TB) (lives [][3]watchdog.Event, prefix string) {
	ctx := context.Background()
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer func() { _ = w.Close(ctx) }()
	const n = 1000
	for i := range n {
		if _, err := w.Start(ctx, "session-"+strconv.Itoa(i), mock.Now(), watchdog.Policy{WallClock: time.Second}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := watchdogtest.Advance(ctx, mock, 2*time.Second, w); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		evs, err := store.Load(ctx, "session-"+strconv.Itoa(i))
		if err != nil {
			tb.Fatal(err)
		}
		if len(evs) != 3 || evs[0].Kind != watchdog.KindStart || evs[1].Kind != watchdog.KindDecision || evs[2].Kind != watchdog.KindCancel {
			tb.Fatalf("session-%d: events %v, want start, decision, cancel", i, kinds(evs))
		}
		lives = append(lives, [3]watchdog.Event(evs))
	}
	prefix, _, _ = strings.Cut(lives[0][0].ID, "-")
	return lives, prefix + "-"
}

// fireSource makes sessions like a Watchdog's that fire: session i is
// template i%1000 with its own session id (made once, as a Watchdog holds
// it), its own event ids (the Watchdog's prefix and counter; both ids of a
// fire in one string, as the Watchdog formats them), and its own copy of
// the evidence summary, which the fire's two events share. The policy is
// shared, as the Watchdog shares one among sessions started with the same.
type fireSource struct {
	lives [][3]watchdog.Event
	ids   record.IDs
	names []string
}

func newFireSource(tb testing.TB) *fireSource {
	lives, prefix := fireTemplates(tb)
	return &fireSource{lives: lives, ids: record.IDs{Prefix: prefix}}
}

// life returns session i's start, decision and cancel events in dst.
func (f *fireSource) life(i int, dst *[3]watchdog.Event) {
	for len(f.names) <= i {
		f.names = append(f.names, "session-"+strconv.Itoa(len(f.names)))
	}
	*dst = f.lives[i%len(f.lives)]
	start, dec, cancel := &dst[0], &dst[1], &dst[2]
	start.AggregateID, dec.AggregateID, cancel.AggregateID = f.names[i], f.names[i], f.names[i]
	start.Seq, dec.Seq, cancel.Seq = 0, 0, 0
	n := 3 * uint64(i)
	start.ID = f.ids.String(n + 1)
	dec.ID, cancel.ID = f.ids.Pair(n+2, n+3)
	cancel.DecidedByDecisionID = dec.ID
	dec.EvidenceSummary = slices.Clone(dec.EvidenceSummary)
	cancel.EvidenceSummary = dec.EvidenceSummary
}

// fireStores are the two implementations the fire benchmarks compare: the
// MemoryStore and its reference copy before compact records.
var fireStores = []struct {
	name string
	new  func() watchdog.EventStore
}{
	{"impl=before", func() watchdog.EventStore { return newRefMemoryStore() }},
	{"impl=memstore", func() watchdog.EventStore { return watchdog.NewMemoryStore() }},
}

// BenchmarkMemoryStoreFire measures the Append of events as the Watchdog's
// recorder calls it, one Append per event, into a store that keeps every
// event: ev=fire, the decision and the cancel of wall-clock fires, each
// session's start appended before, untimed; ev=start, start events. ns/op,
// B/op and allocs/op are per event; the events are made untimed. cpu-ns/op
// is the CPU time the process used (all its threads: the garbage
// collector's too) while it timed, per event: on a loaded machine, it
// moves less than ns/op. Compare the two in runs of one test binary, so
// that both see the same machine, load and temperature:
//
//	go test -c -o /tmp/watchdog.test . && for i in $(seq 10); do
//	  /tmp/watchdog.test -test.run '^$' -test.bench 'MemoryStoreFire' \
//	    -test.benchmem -test.benchtime 100000x -test.count 1; done
func BenchmarkMemoryStoreFire(b *testing.B) {
	src := newFireSource(b)
	for _, ev := range []string{"fire", "start"} {
		for _, s := range fireStores {
			b.Run("ev="+ev+"/"+s.name, func(b *testing.B) {
				benchFire(b, src, s.new(), ev == "start")
			})
		}
	}
}

func benchFire(b *testing.B, src *fireSource, store watchdog.EventStore, starts bool) {
	ctx := context.Background()
	lives := make([][3]watchdog.Event, 256)
	n := 0
	var cpu time.Duration
	var timed []watchdog.Event
	runtime.GC() // not the garbage of the benchmark before
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		timed = timed[:0]
		for j := range lives {
			l := &lives[j]
			src.life(n, l)
			n++
			if starts {
				timed = append(timed, l[0])
				continue
			}
			if err := store.Append(ctx, l[0]); err != nil {
				b.Fatal(err)
			}
			timed = append(timed, l[1], l[2])
		}
		b.StartTimer()
		cpu0 := processCPU()
		for j := 0; j < len(timed) && i < b.N; j, i = j+1, i+1 {
			if err := store.Append(ctx, timed[j:j+1]...); err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU() - cpu0
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	runtime.KeepAlive(store)
}

// heapAlloc returns the live heap after two full collections.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryStoreBytesPerEvent measures what a store keeps per event,
// the live heap it adds over the number of events, with the store held:
// B/fire-event, for the decision and cancel events of 50,000 wall-clock
// fires (100,000 events) appended once their sessions' starts are in the
// store; B/start-event, for those 50,000 start events. The events are made
// as the benchmark goes, so that only what the store keeps of them stays
// live.
//
//	go test -run '^$' -bench 'MemoryStoreBytesPerEvent' -benchtime 1x -count 3 .
func BenchmarkMemoryStoreBytesPerEvent(b *testing.B) {
	const sessions = 50_000
	src := newFireSource(b)
	src.life(sessions-1, new([3]watchdog.Event)) // the session ids
	for _, s := range fireStores {
		b.Run(s.name, func(b *testing.B) {
			ctx := context.Background()
			var perStart, perFire float64
			for b.Loop() {
				store := s.new()
				// appendAll appends the events k of every session and
				// returns the live heap they add.
				appendAll := func(k ...int) float64 {
					before := heapAlloc()
					var l [3]watchdog.Event
					for i := range sessions {
						src.life(i, &l)
						for _, k := range k {
							if err := store.Append(ctx, l[k]); err != nil {
								b.Fatal(err)
							}
						}
					}
					l = [3]watchdog.Event{}
					return float64(int64(heapAlloc()) - int64(before))
				}
				perStart = appendAll(0) / sessions
				perFire = appendAll(1, 2) / (2 * sessions)
				runtime.KeepAlive(store)
			}
			b.ReportMetric(perStart, "B/start-event")
			b.ReportMetric(perFire, "B/fire-event")
			b.ReportMetric(0, "ns/op")
		})
	}
}
