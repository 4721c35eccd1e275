package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sessionwatchdog/watchdog"
)

// The subtests of a watchdog.EachAppender: skipped for a store that is not
// one.

func eachAppender(t *testing.T, s watchdog.EventStore) watchdog.EachAppender {
	t.Helper()
	ea, ok := s.(watchdog.EachAppender)
	if !ok {
		t.Skipf("%T does not implement watchdog.EachAppender", s)
	}
	return ea
}

// appendEach calls AppendEach and checks the shape of its answer: nil, or
// one error per event. It returns one result per event.
func appendEach(t *testing.T, ea watchdog.EachAppender, evs ...watchdog.Event) []error {
	t.Helper()
	errs := ea.AppendEach(ctxT(t), evs)
	if errs == nil {
		return make([]error, len(evs))
	}
	if len(errs) != len(evs) {
		t.Fatalf("AppendEach of %d events returned %d errors, want nil or one per event", len(evs), len(errs))
	}
	return errs
}

func testEachAllRecorded(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	a, b := g.agg("each-a"), g.agg("each-b")
	evs := []watchdog.Event{g.event(a, watchdog.KindStart, 1), g.event(b, watchdog.KindStart, 1),
		g.event(a, watchdog.KindStop, 1), g.event(b, watchdog.KindResume, 1)}
	if errs := ea.AppendEach(ctxT(t), evs); errs != nil {
		t.Fatalf("AppendEach of valid events: %v, want nil", errs)
	}
	sameIDs(t, "session a", mustLoad(t, s, a), []watchdog.Event{evs[0], evs[2]})
	sameIDs(t, "session b", mustLoad(t, s, b), []watchdog.Event{evs[1], evs[3]})
	checkSeqIncreasing(t, "session a", mustLoad(t, s, a))
	// A retry of the whole batch is a no-op.
	if errs := ea.AppendEach(ctxT(t), evs); errs != nil {
		t.Fatalf("AppendEach again: %v, want nil (events already held are skipped)", errs)
	}
	sameIDs(t, "session a after the retry", mustLoad(t, s, a), []watchdog.Event{evs[0], evs[2]})
}

// A terminal event that loses its window's race is refused alone: the rest
// of its batch (the same session's other events included) is recorded.
func testEachLostTerminalSparesTheBatch(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	a, b := g.agg("each-lost"), g.agg("each-other")
	winner := g.event(a, watchdog.KindCancel, 1)
	mustAppend(t, s, g.event(a, watchdog.KindStart, 1), winner)
	evs := []watchdog.Event{g.event(b, watchdog.KindStart, 1), g.event(a, watchdog.KindStop, 1),
		g.event(a, watchdog.KindResume, 2), g.event(b, watchdog.KindStop, 1)}
	errs := appendEach(t, ea, evs...)
	for i, err := range errs {
		if i == 1 {
			if !errors.Is(err, watchdog.ErrAlreadyDecided) {
				t.Fatalf("the losing terminal event: %v, want an error wrapping ErrAlreadyDecided", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("event %d of the batch: %v, want recorded", i, err)
		}
	}
	got := mustLoad(t, s, a)
	if len(got) != 3 || got[1].ID != winner.ID || got[2].ID != evs[2].ID {
		t.Fatalf("session a holds %v, want start, the winner %s and the resume %s", ids(got), winner.ID, evs[2].ID)
	}
	sameIDs(t, "session b", mustLoad(t, s, b), []watchdog.Event{evs[0], evs[3]})
}

func testEachTwoTerminalsInOneBatch(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	a := g.agg("each-two")
	start, stop, cancel := g.event(a, watchdog.KindStart, 1), g.event(a, watchdog.KindStop, 1), g.event(a, watchdog.KindCancel, 1)
	errs := appendEach(t, ea, start, stop, cancel)
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], watchdog.ErrAlreadyDecided) {
		t.Fatalf("start, stop, cancel of one window in one batch: %v, want nil, nil, ErrAlreadyDecided", errs)
	}
	sameIDs(t, "the window", mustLoad(t, s, a), []watchdog.Event{start, stop})
}

// An event refused for good is refused alone, with an error that names it.
func testEachRefusalSparesTheBatch(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			a, b := g.agg("each-hostile"), g.agg("each-bystander")
			first, other := g.event(a, watchdog.KindStart, 1), g.event(b, watchdog.KindStart, 1)
			bad := g.event(a, watchdog.KindResume, 1)
			bad.ID += "-hostile"
			name := bad.ID
			c.mutate(&bad)
			errs := appendEach(t, ea, first, bad, other)
			if errs[0] != nil || errs[2] != nil {
				t.Fatalf("the valid events beside a hostile one: %v, %v; want both recorded", errs[0], errs[2])
			}
			if c.mayStore && errs[1] == nil {
				return
			}
			checkRefusedForGood(t, "AppendEach", name, errs[1])
			sameIDs(t, "the hostile event's session", mustLoad(t, s, a), []watchdog.Event{first})
			sameIDs(t, "another session", mustLoad(t, s, b), []watchdog.Event{other})
		})
	}
}

// Racing batches that each hold a terminal event for one shared window:
// exactly one is told it recorded it, and every other event is recorded.
func testEachRacingTerminals(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	const racers = 12
	shared := g.agg("each-race")
	mustAppend(t, s, g.event(shared, watchdog.KindStart, 1))
	var (
		mu    sync.Mutex
		wins  int
		own   []watchdog.Event
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for r := range racers {
		mine := g.agg(fmt.Sprint("each-racer", r))
		evs := []watchdog.Event{g.event(mine, watchdog.KindStart, 1), g.event(shared, watchdog.KindCancel, 1), g.event(mine, watchdog.KindStop, 1)}
		own = append(own, evs[0], evs[2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs := ea.AppendEach(context.Background(), evs)
			mu.Lock()
			defer mu.Unlock()
			if errs == nil {
				wins++
				return
			}
			if len(errs) != len(evs) || errs[0] != nil || errs[2] != nil {
				t.Errorf("racer %d: %v, want its own events recorded", r, errs)
				return
			}
			switch {
			case errs[1] == nil:
				wins++
			case !errors.Is(errs[1], watchdog.ErrAlreadyDecided):
				t.Errorf("racer %d: the shared terminal: %v, want nil or ErrAlreadyDecided", r, errs[1])
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d racers were told they recorded the shared window's terminal event, want exactly 1", wins)
	}
	terminals := 0
	for _, e := range mustLoad(t, s, shared) {
		if e.Terminal() {
			terminals++
		}
	}
	if terminals != 1 {
		t.Fatalf("the shared window has %d terminal events, want 1", terminals)
	}
	for _, e := range own {
		got := mustLoad(t, s, e.AggregateID)
		found := false
		for _, h := range got {
			found = found || h.ID == e.ID
		}
		if !found {
			t.Fatalf("racer's event %s was not recorded", e.ID)
		}
	}
}

// A subscription sees the events of a batch, whichever sessions it holds.
func testEachSubscribe(t *testing.T, g *gen, s watchdog.EventStore) {
	ea := eachAppender(t, s)
	sub := subscriber(t, s)
	a, b := g.agg("each-sub-a"), g.agg("each-sub-b")
	cha, cancelA := subscribe(t, sub, a)
	defer cancelA()
	chb, cancelB := subscribe(t, sub, b)
	defer cancelB()
	evs := []watchdog.Event{g.event(a, watchdog.KindStart, 1), g.event(b, watchdog.KindStart, 1), g.event(a, watchdog.KindStop, 1)}
	for i, err := range appendEach(t, ea, evs...) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	sameIDs(t, "delivered for a", receive(t, cha, 2), []watchdog.Event{evs[0], evs[2]})
	sameIDs(t, "delivered for b", receive(t, chb, 1), []watchdog.Event{evs[1]})
}

// The subtests of a watchdog.Arbiter: skipped for a store that is not one
// or does not arbitrate.

func arbiter(t *testing.T, s watchdog.EventStore) {
	t.Helper()
	if a, ok := s.(watchdog.Arbiter); !ok || !a.Arbitrates() {
		t.Skipf("%T does not arbitrate window openings (watchdog.Arbiter)", s)
	}
}

func opening(g *gen, agg, kind string, window int) watchdog.Event {
	e := g.event(agg, kind, window)
	e.OpensWindow = true
	return e
}

// A second opening of a window is refused with ErrAlreadyWatched, whether
// appended alone or in a batch; a retry of the first is skipped, and the
// window's other events are accepted.
func testOpeningArbitration(t *testing.T, g *gen, s watchdog.EventStore) {
	arbiter(t, s)
	a := g.agg("open")
	first := opening(g, a, watchdog.KindStart, 1)
	mustAppend(t, s, first)
	mustAppend(t, s, first) // a retry
	if err := s.Append(ctxT(t), opening(g, a, watchdog.KindStart, 1)); !errors.Is(err, watchdog.ErrAlreadyWatched) {
		t.Fatalf("a second start of window 1: err = %v, want one wrapping ErrAlreadyWatched", err)
	}
	if err := s.Append(ctxT(t), opening(g, a, watchdog.KindResume, 1)); !errors.Is(err, watchdog.ErrAlreadyWatched) {
		t.Fatalf("a resume opening window 1 again: err = %v, want one wrapping ErrAlreadyWatched", err)
	}
	cont := g.event(a, watchdog.KindResume, 1) // continues the window: not an opening
	stop := g.event(a, watchdog.KindStop, 1)
	mustAppend(t, s, cont, stop)
	next := opening(g, a, watchdog.KindResume, 2)
	mustAppend(t, s, next)
	sameIDs(t, "the session", mustLoad(t, s, a), []watchdog.Event{first, cont, stop, next})
	if ea, ok := s.(watchdog.EachAppender); ok {
		other := g.event(g.agg("open-bystander"), watchdog.KindStart, 1)
		errs := appendEach(t, ea, opening(g, a, watchdog.KindResume, 2), other)
		if !errors.Is(errs[0], watchdog.ErrAlreadyWatched) || errs[1] != nil {
			t.Fatalf("AppendEach of a second opening of window 2 beside another session's event: %v, want ErrAlreadyWatched and nil", errs)
		}
	}
}

// Racing openings of one window: exactly one is recorded.
func testRacingOpenings(t *testing.T, g *gen, s watchdog.EventStore) {
	arbiter(t, s)
	const racers = 12
	a := g.agg("open-race")
	var (
		mu    sync.Mutex
		wins  int
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for r := range racers {
		e := opening(g, a, watchdog.KindStart, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := s.Append(context.Background(), e)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, watchdog.ErrAlreadyWatched):
				t.Errorf("racer %d: %v, want nil or ErrAlreadyWatched", r, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d racers opened window 1, want exactly 1", wins)
	}
	if got := mustLoad(t, s, a); len(got) != 1 {
		t.Fatalf("the window holds %d openings, want 1", len(got))
	}
}
