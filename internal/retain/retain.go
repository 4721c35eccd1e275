// Package retain is the per-session index of a store's events (the memory
// store's and the file store's), with the retention they share: keep the
// last N ended windows of each session, and forget a session whose last
// window ended a TTL ago, the TTL measured on the events' own occurred_at.
//
// The index is a function of the sequence of events added to it: a store
// that rebuilds it from its log (the file store's Open) gets the state the
// appends built.
package retain

import (
	"fmt"
	"slices"
	"time"
)

// Policy is what an Index keeps. The zero value keeps everything.
type Policy struct {
	// Windows is how many ended windows of each session are kept besides
	// its open window; 0 keeps every window.
	Windows int
	// After is how long a session whose last window ended is kept: it is
	// forgotten once an event occurred After past its end. 0 never forgets.
	After time.Duration
}

// Check returns an error naming the field when p has a negative one, in
// the terms of watchdog.Retention (KeepWindows, ForgetAfter), else nil.
func (p Policy) Check() error {
	if p.Windows < 0 {
		return fmt.Errorf("retention: KeepWindows %d is negative (0 keeps every window)", p.Windows)
	}
	if p.After < 0 {
		return fmt.Errorf("retention: ForgetAfter %v is negative (0 keeps ended sessions)", p.After)
	}
	return nil
}

// Index holds each session's events (as handles H of the store's) in
// append order, and each kept window's terminal event. Not safe for
// concurrent use: the store's lock guards it.
type Index[H any] struct {
	p        Policy
	drop     func(H) // called for each event forgotten
	sessions map[string]*session[H]
	lastID   string // the session last looked up, which a store's next call is likely about
	last     *session[H]
	latest   time.Time // the latest occurred_at added: the clock After is measured on
	due      []due     // sessions in the order their last window ended
	dueHead  int
	live     int
}

type entry[H any] struct {
	window int
	h      H
}

type end struct {
	window int
	id     string
}

type session[H any] struct {
	entries []entry[H] // in append order
	ended   []end      // the terminal events of windows >= floor, by window
	floor   int        // every window below it ended and was forgotten
	last    int        // the highest window added
	endAt   time.Time  // when window last ended; zero while it is open
}

type due struct {
	id string
	at time.Time
}

// New returns an empty Index under p. drop, if not nil, is called with each
// handle the Index forgets.
func New[H any](p Policy, drop func(H)) *Index[H] {
	if drop == nil {
		drop = func(H) {}
	}
	return &Index[H]{p: p, drop: drop, sessions: make(map[string]*session[H])}
}

// Live returns how many events the Index holds.
func (x *Index[H]) Live() int { return x.live }

// Terminal reports whether the session's window has ended, and the event
// that ended it: "" for a window the retention forgot.
func (x *Index[H]) Terminal(id string, window int) (string, bool) {
	s := x.session(id)
	if s == nil {
		return "", false
	}
	if window < s.floor {
		return "", true
	}
	for _, e := range s.ended {
		if e.window == window {
			return e.id, true
		}
	}
	return "", false
}

// Add records an event of session id: its window, its event id if it is
// terminal ("" if not), when it occurred, and the store's handle for it.
// The caller has checked that a terminal event's window has no other
// (Terminal). Then Add applies the policy, calling drop for what it
// forgets, possibly h itself (an event of a forgotten window).
func (x *Index[H]) Add(id string, window int, terminal string, at time.Time, h H) {
	if at.After(x.latest) {
		x.latest = at
	}
	s := x.session(id)
	if s == nil {
		// Room for two events: a session that ends has at least two.
		s = &session[H]{entries: make([]entry[H], 0, 2)}
		x.sessions[id] = s
		x.lastID, x.last = id, s
	}
	if window < s.floor {
		x.drop(h) // a late event of a window already forgotten
		x.expire()
		return
	}
	s.entries = append(s.entries, entry[H]{window, h})
	x.live++
	if window > s.last {
		s.last, s.endAt = window, time.Time{}
	}
	if terminal != "" {
		i, _ := slices.BinarySearchFunc(s.ended, window, func(e end, w int) int { return e.window - w })
		s.ended = slices.Insert(s.ended, i, end{window, terminal})
		if n := x.p.Windows; n > 0 && len(s.ended) > n {
			x.prune(s, s.ended[len(s.ended)-n].window)
		}
		if window == s.last {
			s.endAt = x.latest
			if !at.IsZero() {
				s.endAt = at
			}
			if x.p.After > 0 {
				x.due = append(x.due, due{id, s.endAt})
			}
		}
	}
	x.expire()
}

// prune forgets the windows of s below floor.
func (x *Index[H]) prune(s *session[H], floor int) {
	kept := s.entries[:0]
	for _, e := range s.entries {
		if e.window < floor {
			x.drop(e.h)
			x.live--
			continue
		}
		kept = append(kept, e)
	}
	clear(s.entries[len(kept):]) // release the handles
	s.entries = kept
	i := 0
	for i < len(s.ended) && s.ended[i].window < floor {
		i++
	}
	s.ended = slices.Delete(s.ended, 0, i)
	s.floor = floor
}

// expire forgets the sessions whose last window ended After before the
// latest event. A session that ended out of order (its occurred_at before
// one that ended earlier in append order) waits for it: never early.
func (x *Index[H]) expire() {
	if x.p.After <= 0 {
		return
	}
	for x.dueHead < len(x.due) {
		d := x.due[x.dueHead]
		if d.at.Add(x.p.After).After(x.latest) {
			break
		}
		x.due[x.dueHead] = due{}
		x.dueHead++
		s := x.sessions[d.id]
		if s == nil || s.endAt.IsZero() || s.endAt.Add(x.p.After).After(x.latest) {
			continue // resumed since, or ended again later (a later entry is due)
		}
		for _, e := range s.entries {
			x.drop(e.h)
		}
		x.live -= len(s.entries)
		delete(x.sessions, d.id)
		if s == x.last {
			x.lastID, x.last = "", nil
		}
	}
	if x.dueHead > 1024 && x.dueHead*2 > len(x.due) {
		x.due = append(x.due[:0:0], x.due[x.dueHead:]...)
		x.dueHead = 0
	}
}

// session returns session id, or nil.
func (x *Index[H]) session(id string) *session[H] {
	if x.last != nil && x.lastID == id {
		return x.last
	}
	s := x.sessions[id]
	if s != nil {
		x.lastID, x.last = id, s
	}
	return s
}

// Each calls fn with each event of session id, in append order.
func (x *Index[H]) Each(id string, fn func(H)) {
	if s := x.sessions[id]; s != nil {
		for _, e := range s.entries {
			fn(e.h)
		}
	}
}

// Len returns how many events of session id the Index holds.
func (x *Index[H]) Len(id string) int {
	if s := x.sessions[id]; s != nil {
		return len(s.entries)
	}
	return 0
}

// All calls fn with every handle the Index holds, sessions in no
// particular order; fn may change the handle (a store that moves its
// events).
func (x *Index[H]) All(fn func(*H)) {
	for _, s := range x.sessions {
		for i := range s.entries {
			fn(&s.entries[i].h)
		}
	}
}

// Shrink rebuilds the Index's session table at its current size: a Go map
// keeps the room of its largest size, which retention makes a peak, not a
// steady state. The stores call it when they compact.
func (x *Index[H]) Shrink() {
	m := make(map[string]*session[H], len(x.sessions))
	for k, v := range x.sessions {
		m[k] = v
	}
	x.sessions = m
}

// RaiseFloors makes, in each session, every window below the oldest one
// the Index holds count as forgotten (ended): what a store that rebuilt the
// Index from a compacted log knows of the windows the retention forgot
// before. For a Policy that keeps windows only (Windows > 0): a window
// opens only after the one before it ended, so they have.
func (x *Index[H]) RaiseFloors() {
	for _, s := range x.sessions {
		low := s.last
		for _, e := range s.entries {
			low = min(low, e.window)
		}
		s.floor = max(s.floor, low)
	}
}
