//go:build unix

// Command scale measures a Watchdog at scale beside the naive approaches, in
// the same process: idle CPU with many sessions watched and nothing due, the
// full GC cycle with them, and fire lateness (fired_at minus the due instant)
// of many sessions due within a few seconds on the real clock, on an idle
// machine and with CPU-bound goroutines beside it. See BENCHMARKS.md.
//
//	go run ./internal/cmd/scale -mode idle -n 1000000 -naive-n 100000
//	go run ./internal/cmd/scale -mode gc -n 1000000
//	go run ./internal/cmd/scale -mode lateness -n 100000 -busy 0,8
//
// Unix only: it reads the process's CPU time with getrusage.
package main

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

type discardStore struct{}

func (discardStore) Append(context.Context, ...watchdog.Event) error { return nil }
func (discardStore) Load(context.Context, string) ([]watchdog.Event, error) {
	return nil, nil
}

var (
	mode       = flag.String("mode", "all", "idle, gc, lateness or all")
	n          = flag.Int("n", 1_000_000, "sessions watched by the Watchdog (idle, gc)")
	naiveN     = flag.Int("naive-n", 100_000, "sessions of the goroutine+ticker approach (idle, gc)")
	lateN      = flag.Int("late-n", 100_000, "sessions due during the lateness run")
	spread     = flag.Duration("spread", 2*time.Second, "the lateness run's deadlines are spread over this")
	busy       = flag.String("busy", "0,8", "comma-separated numbers of CPU-bound goroutines beside the lateness run")
	dur        = flag.Duration("dur", 10*time.Second, "idle CPU measuring time")
	store      = flag.String("store", "discard", "discard or memory: the Watchdog's EventStore (idle, gc)")
	rounds     = flag.Int("gc-rounds", 5, "timed runtime.GC calls (gc); the median is printed")
	tickEvr    = flag.Duration("tick", time.Second, "the naive goroutine's ticker period")
	gcImpls    = flag.String("gc-impls", "watchdog,ticker,afterfunc,context", "approaches measured by -mode gc, in this order in one process (run one per process for clean figures: a goroutine per session leaves its dead goroutines' descriptors on the heap for good)")
	cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	traceOut   = flag.String("trace", "", "write an execution trace of the whole run to this file")
	memProfile = flag.String("memprofile", "", "write an allocation profile of the whole run to this file when it ends")
)

func main() {
	flag.Parse()
	if *memProfile != "" {
		defer func() {
			f, err := os.Create(*memProfile)
			if err != nil {
				fatal(err)
			}
			defer f.Close()
			runtime.GC() // the profile is as of the last collection
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fatal(err)
			}
		}()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			fatal(err)
		}
		if err := trace.Start(f); err != nil {
			fatal(err)
		}
		defer trace.Stop()
	}
	fmt.Printf("# %s %s/%s GOMAXPROCS=%d NumCPU=%d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	switch *mode {
	case "idle":
		idle()
	case "gc":
		gcRun()
	case "lateness":
		lateness()
	case "all":
		idle()
		gcRun()
		lateness()
	default:
		fmt.Fprintln(os.Stderr, "unknown -mode", *mode)
		os.Exit(2)
	}
}

func newWatchdog(opts ...watchdog.Option) *watchdog.Watchdog {
	if *store == "discard" {
		opts = append(opts, watchdog.WithStore(discardStore{}))
	}
	return watchdog.New(opts...)
}

// watch starts count sessions on w whose budget does not run out during the run.
func watch(w *watchdog.Watchdog, count int) {
	ctx := context.Background()
	now := time.Now()
	pol := watchdog.Policy{WallClock: 24 * time.Hour}
	var buf []byte
	for i := range count {
		buf = strconv.AppendInt(append(buf[:0], "s-"...), int64(i), 10)
		if _, err := w.Start(ctx, string(buf), now, pol); err != nil {
			fatal(err)
		}
	}
	if err := w.Check(ctx); err != nil {
		fatal(err)
	}
}

// tickers starts the naive watchdog: one goroutine with a time.Ticker per
// session. The returned function stops them.
func tickers(count int) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	deadline := time.Now().Add(24 * time.Hour)
	for range count {
		sctx, scancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(*tickEvr)
			defer t.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case now := <-t.C:
					if now.After(deadline) {
						scancel()
						return
					}
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleCPU measures the CPU the process uses over d while nothing is due.
func idleCPU(d time.Duration) float64 {
	runtime.GC()
	time.Sleep(time.Second) // let the GC's background work finish
	c0, t0 := cpuTime(), time.Now()
	time.Sleep(d)
	return float64(cpuTime()-c0) / float64(time.Since(t0)) * 100
}

func idle() {
	fmt.Printf("\n## idle CPU over %v (%% of one core; store=%s)\n\n", *dur, *store)
	fmt.Println("| approach | sessions | CPU % of one core | CPU per session per second |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	row := func(name string, count int, pct float64) {
		per := "-"
		if count > 0 {
			per = fmt.Sprintf("%.3f µs", pct/100*1e6/float64(count))
		}
		fmt.Printf("| %s | %d | %.3f | %s |\n", name, count, pct, per)
	}
	row("no Watchdog (the Go runtime alone)", 0, idleCPU(*dur))
	w := newWatchdog()
	row("watchdog", 0, idleCPU(*dur))
	watch(w, *n)
	row("watchdog", *n, idleCPU(*dur))
	_ = w.Close(context.Background())
	w = nil
	stop := tickers(*naiveN)
	row(fmt.Sprintf("goroutine+ticker(%v)", *tickEvr), *naiveN, idleCPU(*dur))
	stop()
}

// gcTime runs rounds full collections and returns the median wall time of
// runtime.GC and the median stop-the-world pause total per cycle.
func gcTime() (time.Duration, time.Duration) {
	var walls, pauses []time.Duration
	for range *rounds {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t := time.Now()
		runtime.GC()
		walls = append(walls, time.Since(t))
		runtime.ReadMemStats(&m1)
		pauses = append(pauses, time.Duration(m1.PauseTotalNs-m0.PauseTotalNs))
	}
	slices.Sort(walls)
	slices.Sort(pauses)
	return walls[len(walls)/2], pauses[len(pauses)/2]
}

func liveMB() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc+m.StackInuse) / (1 << 20)
}

func gcRun() {
	fmt.Printf("\n## full GC cycle (median of %d runtime.GC calls; store=%s)\n\n", *rounds, *store)
	fmt.Println("| approach | sessions | live heap+stacks MB | runtime.GC wall | STW pauses |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	row := func(name string, count int) {
		runtime.GC()
		wall, stw := gcTime()
		fmt.Printf("| %s | %d | %.0f | %v | %v |\n", name, count, liveMB(), wall.Round(10*time.Microsecond), stw.Round(time.Microsecond))
	}
	row("empty process", 0)
	for _, impl := range strings.Split(*gcImpls, ",") {
		switch strings.TrimSpace(impl) {
		case "watchdog":
			w := newWatchdog()
			watch(w, *n)
			row("watchdog", *n)
			_ = w.Close(context.Background())
		case "ticker":
			stop := tickers(*naiveN)
			row(fmt.Sprintf("goroutine+ticker(%v)", *tickEvr), *naiveN)
			stop()
		case "afterfunc":
			timers := make([]*time.Timer, *naiveN)
			cancels := make([]context.CancelFunc, *naiveN)
			for i := range timers {
				_, cancel := context.WithCancel(context.Background())
				cancels[i] = cancel
				timers[i] = time.AfterFunc(24*time.Hour, cancel)
			}
			row("afterfunc", *naiveN)
			for i := range timers {
				timers[i].Stop()
				cancels[i]()
			}
		case "context":
			// The floor of any design with a context per session.
			ctxs := make([]context.Context, *n)
			cancels := make([]context.CancelCauseFunc, *n)
			for i := range ctxs {
				ctxs[i], cancels[i] = context.WithCancelCause(context.Background())
			}
			row("context.WithCancelCause only", *n)
			for _, c := range cancels {
				c(nil)
			}
		default:
			fatal(fmt.Errorf("unknown -gc-impls entry %q", impl))
		}
		runtime.GC()
	}
}

// spin is a CPU-bound goroutine.
func spin(stop <-chan struct{}) {
	x := uint64(1)
	for {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		select {
		case <-stop:
			sink = x
			return
		default:
		}
	}
}

var sink uint64

type lat struct{ p50, p99, max, min time.Duration }

func percentiles(ds []time.Duration) lat {
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(int(q*float64(len(ds))), len(ds)-1)] }
	return lat{at(0.50), at(0.99), ds[len(ds)-1], ds[0]}
}

// dues returns count due instants spread evenly over spread, starting one
// -late-start from now, in a shuffled order.
func dues(count int) []time.Time {
	t0 := time.Now().Add(*lateStart)
	out := make([]time.Time, count)
	for i := range out {
		out[i] = t0.Add(time.Duration(int64(i) * int64(*spread) / int64(count)))
	}
	// deterministic shuffle so that start order is not due order
	for i := len(out) - 1; i > 0; i-- {
		j := int((uint64(i) * 2654435761) % uint64(i+1))
		out[i], out[j] = out[j], out[i]
	}
	return out
}

var (
	lateStart   = flag.Duration("late-start", 5*time.Second, "delay from the start of the setup to the first deadline of the lateness run")
	lateStore   = flag.String("late-store", "memory,discard", "comma-separated EventStores of the lateness run's Watchdog: memory, discard")
	fireProfile = flag.String("fire-profile", "", "write a CPU profile of the lateness run's fires (from the end of the setup to the last recorded event, the first approach of the first -busy value only) to this file")
	lateNaive   = flag.String("late-naive", "heap,afterfunc", "comma-separated naive approaches of the lateness run: heap (one goroutine, a min-heap and a time.Timer), heap+discard and heap+memory (that heap, recording each fire's decision and cancel events into the store named), afterfunc (a time.AfterFunc per session); empty for none")
)

// watchdogLateness watches count sessions due within the spread with the
// default MemoryStore and returns, for each, the instant its context's Done
// was seen (a context.AfterFunc, as for every approach) minus the due
// instant (the last instant of the window). A fire is early if its
// verdict's fired_at is not after the due instant.
//
// It also returns how long after the last due instant every event was
// recorded (Close returned).
func watchdogLateness(count int, store string, busy, done func()) (lat, int, time.Duration) {
	var opts []watchdog.Option
	if store == "discard" {
		opts = append(opts, watchdog.WithStore(discardStore{}))
	}
	w := watchdog.New(opts...)
	ctx := context.Background()
	budget := time.Hour
	ds := dues(count)
	sessions := make([]*watchdog.Session, count)
	out := make([]time.Duration, count)
	var wg sync.WaitGroup
	wg.Add(count)
	for i, due := range ds {
		s, err := w.Start(ctx, "late-"+strconv.Itoa(i), due.Add(-budget), watchdog.Policy{WallClock: budget})
		if err != nil {
			fatal(err)
		}
		sessions[i] = s
		context.AfterFunc(s.Context(), func() { out[i] = time.Since(due); wg.Done() })
	}
	if err := w.Check(ctx); err != nil {
		fatal(err)
	}
	runtime.GC() // the setup's garbage is not part of the run
	if slices.MinFunc(ds, func(a, b time.Time) int { return a.Compare(b) }).Before(time.Now()) {
		fatal(errors.New("setup took longer than -late-start: raise it"))
	}
	busy()
	wg.Wait()
	if err := w.Close(context.Background()); err != nil {
		fatal(err)
	}
	done()
	last := 0
	for i, due := range ds {
		if due.After(ds[last]) {
			last = i
		}
	}
	early := 0
	for _, s := range sessions {
		var v *watchdog.VerdictError
		if !errors.As(context.Cause(s.Context()), &v) {
			fatal(fmt.Errorf("session %s: %v", s.ID(), context.Cause(s.Context())))
		}
		if !v.FiredAt.After(s.Deadline()) {
			early++
		}
	}
	return percentiles(out), early, time.Since(ds[last])
}

// afterFuncLateness arms one time.AfterFunc per session that cancels its
// context, and returns when each context's Done was seen (a
// context.AfterFunc) minus its due instant.
func afterFuncLateness(count int, busy, done func()) (lat, int) {
	ds := dues(count)
	out := make([]time.Duration, count)
	var wg sync.WaitGroup
	wg.Add(count)
	for i, due := range ds {
		ctx, cancel := context.WithCancel(context.Background())
		context.AfterFunc(ctx, func() { out[i] = time.Since(due); wg.Done() })
		time.AfterFunc(time.Until(due), cancel)
	}
	runtime.GC() // the setup's garbage is not part of the run
	if slices.MinFunc(ds, func(a, b time.Time) int { return a.Compare(b) }).Before(time.Now()) {
		fatal(errors.New("setup took longer than -late-start: raise it"))
	}
	busy()
	wg.Wait()
	done()
	early := 0
	for _, d := range out {
		if d < 0 {
			early++
		}
	}
	return percentiles(out), early
}

// deadlineHeap is the naive heap scheduler's min-heap of due instants.
type deadlineHeap []heapItem

type heapItem struct {
	due    time.Time
	i      int
	cancel context.CancelFunc
}

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(heapItem)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// heapLateness is the naive single scheduler a user could write: one
// goroutine, a min-heap of deadlines and one time.Timer for the earliest. It
// returns when each context was cancelled minus its due instant.
//
// With a store, it is that scheduler recording what the watchdog records of
// a fire (the naive rows heap+discard and heap+memory): each fire's decision
// and cancel events, with an evidence summary of the four built-in
// channels, are built on the scheduler goroutine and appended one at a time
// by a goroutine of their own, which gets them 64 fires at a time; each
// session's start event is appended during the setup, as Start does. It
// then returns once every event is recorded.
func heapLateness(count int, store watchdog.EventStore, busy, done func()) (lat, int) {
	ds := dues(count)
	out := make([]time.Duration, count)
	h := make(deadlineHeap, 0, count)
	var wg sync.WaitGroup
	wg.Add(count)
	ctx0 := context.Background()
	ids := make([]string, count) // the session ids, as the watchdog keeps them
	seq := 0                     // the last event id's number
	for i, due := range ds {
		ctx, cancel := context.WithCancel(context.Background())
		context.AfterFunc(ctx, func() { out[i] = time.Since(due); wg.Done() })
		h = append(h, heapItem{due, i, cancel})
		if store != nil {
			seq++
			ids[i] = "late-" + strconv.Itoa(i)
			start := naiveEvent("evt-"+strconv.Itoa(seq), ids[i], watchdog.KindStart, due, due.Add(-time.Hour))
			if err := store.Append(ctx0, start); err != nil {
				fatal(err)
			}
		}
	}
	heap.Init(&h)
	var batches chan []watchdog.Event
	recorded := make(chan struct{})
	if store != nil {
		batches = make(chan []watchdog.Event, 1024)
		go func() {
			defer close(recorded)
			for b := range batches {
				for i := range b {
					if err := store.Append(ctx0, b[i:i+1]...); err != nil {
						fatal(err)
					}
				}
			}
		}()
	} else {
		close(recorded)
	}
	runtime.GC() // the setup's garbage is not part of the run
	if slices.MinFunc(ds, func(a, b time.Time) int { return a.Compare(b) }).Before(time.Now()) {
		fatal(errors.New("setup took longer than -late-start: raise it"))
	}
	busy()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTimer(time.Until(h[0].due))
		defer t.Stop()
		for range t.C {
			now := time.Now()
			b := make([]watchdog.Event, 0, 128) // 64 fires a batch, as the watchdog's
			for len(h) > 0 && !h[0].due.After(now) {
				it := heap.Pop(&h).(heapItem)
				if store != nil {
					if b = naiveFire(b, &seq, ids[it.i], it.due, now); len(b) == cap(b) {
						batches <- b
						b = make([]watchdog.Event, 0, 128)
					}
				}
				it.cancel()
			}
			if len(b) > 0 {
				batches <- b
			}
			if len(h) == 0 {
				return
			}
			t.Reset(time.Until(h[0].due))
		}
	}()
	<-finished
	if batches != nil {
		close(batches)
	}
	<-recorded
	wg.Wait()
	done()
	early := 0
	for _, d := range out {
		if d < 0 {
			early++
		}
	}
	return percentiles(out), early
}

// naiveEvent is event id of session sid's window 1, which started one
// hour before its due instant.
func naiveEvent(id, sid, kind string, due, now time.Time) watchdog.Event {
	started, now := due.Add(-time.Hour).UTC(), now.UTC() // UTC, as the watchdog's: no monotonic reading to keep
	return watchdog.Event{
		ID: id, AggregateID: sid, Kind: kind, Window: 1, SessionStartedAt: started, WindowStartedAt: started,
		OccurredAt: now, ElapsedSeconds: now.Sub(started).Seconds(), ConfiguredBudgetSeconds: time.Hour.Seconds(),
	}
}

// naiveFire appends the decision and cancel events of session sid's fire
// at now to dst, as the watchdog records them, their ids numbered from
// *seq.
func naiveFire(dst []watchdog.Event, seq *int, sid string, due, now time.Time) []watchdog.Event {
	summary := make([]watchdog.EvidenceEntry, 4)
	for k, ch := range []string{"stdout", "mcp_tool", "subagent", "workspace"} {
		summary[k].Channel = ch
	}
	no := false
	*seq += 2
	dec := naiveEvent("evt-"+strconv.Itoa(*seq-1), sid, watchdog.KindDecision, due, now)
	dec.Rule, dec.Mode, dec.Reason, dec.Recoverable = "wall_clock", watchdog.ModeAct, "wall_clock_exceeded", &no
	dec.MeasureSeconds, dec.LimitSeconds, dec.ActiveChannel = dec.ElapsedSeconds, time.Hour.Seconds(), "none"
	dec.EvidenceSummary = summary
	cancel := naiveEvent("evt-"+strconv.Itoa(*seq), sid, watchdog.KindCancel, due, now)
	cancel.Rule, cancel.Reason, cancel.Recoverable, cancel.FiredAt = dec.Rule, dec.Reason, &no, cancel.OccurredAt
	cancel.MeasureSeconds, cancel.LimitSeconds, cancel.DecidedByDecisionID = dec.MeasureSeconds, dec.LimitSeconds, dec.ID
	cancel.EvidenceSummary = summary
	return append(dst, dec, cancel)
}

func lateness() {
	fmt.Printf("\n## fire lateness: %d sessions due within %v (real clock)\n\n", *lateN, *spread)
	fmt.Println("| approach/store | CPU-bound goroutines | p50 | p99 | max | early | all recorded | CPU per fire |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, f := range strings.Split(*busy, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fatal(err)
		}
		var impls []string
		for _, st := range strings.Split(*lateStore, ",") {
			impls = append(impls, "watchdog/"+strings.TrimSpace(st))
		}
		if *lateNaive != "" {
			impls = append(impls, strings.Split(*lateNaive, ",")...)
		}
		for _, impl := range impls {
			runtime.GC()
			stop := make(chan struct{})
			var cpu0, cpu time.Duration
			var ms runtime.MemStats
			var mallocs uint64
			profiling := false
			busy := func() { // once the setup is done, before the first deadline
				if *fireProfile != "" {
					f, err := os.Create(*fireProfile)
					if err != nil {
						fatal(err)
					}
					*fireProfile = ""
					profiling = pprof.StartCPUProfile(f) == nil
				}
				runtime.ReadMemStats(&ms)
				mallocs = ms.Mallocs
				cpu0 = cpuTime()
				for range k {
					go spin(stop)
				}
			}
			done := func() { // every context cancelled and, for the watchdog, every event recorded
				cpu = cpuTime() - cpu0
				runtime.ReadMemStats(&ms)
				mallocs = ms.Mallocs - mallocs
				if profiling {
					pprof.StopCPUProfile()
				}
			}
			var l lat
			var early int
			recorded := "-"
			if st, ok := strings.CutPrefix(impl, "watchdog/"); ok {
				var d time.Duration
				l, early, d = watchdogLateness(*lateN, st, busy, done)
				recorded = rnd(d).String()
			} else if st, ok := strings.CutPrefix(impl, "heap+"); ok {
				var store watchdog.EventStore = discardStore{}
				if st == "memory" {
					store = watchdog.NewMemoryStore()
				} else if st != "discard" {
					fatal(fmt.Errorf("-late-naive: unknown store in %q", impl))
				}
				l, early = heapLateness(*lateN, store, busy, done)
			} else if impl == "heap" {
				l, early = heapLateness(*lateN, nil, busy, done)
			} else {
				l, early = afterFuncLateness(*lateN, busy, done)
			}
			close(stop)
			perFire := "-" // the busy goroutines' CPU is in the process's: only without them
			if k == 0 {
				perFire = fmt.Sprintf("%v, %.1f allocs", cpu/time.Duration(*lateN), float64(mallocs)/float64(*lateN))
			}
			fmt.Printf("| %s | %d | %v | %v | %v | %d | %s | %s |\n", impl, k, rnd(l.p50), rnd(l.p99), rnd(l.max), early, recorded, perFire)
		}
	}
}

func rnd(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

func init() { debug.SetTraceback("all") }
