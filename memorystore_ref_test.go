package watchdog_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/relay"
)

// refMemoryStore is the MemoryStore as it was before it kept compact
// records (commit b40d4a9), less its Subscribe method (Append still looks
// for subscribers) and its retention: every event kept as a full Event, in
// an index as internal/retain's was then (refIndex). It is here only so
// that the benchmarks measure both in one run (BenchmarkMemoryStoreFire,
// BenchmarkMemoryStoreBytesPerEvent).
type refMemoryStore struct {
	mu     sync.Mutex
	seq    uint64
	log    [][]watchdog.Event
	logLen int
	idx    *refIndex
	ids    map[string]struct{}
	subs   map[string]map[*relay.Relay[watchdog.Event]]struct{}
}

type refWindowKey struct {
	id     string
	window int
}

const refChunk = 1024

func newRefMemoryStore() *refMemoryStore {
	m := &refMemoryStore{ids: make(map[string]struct{}), subs: make(map[string]map[*relay.Relay[watchdog.Event]]struct{})}
	m.idx = &refIndex{sessions: make(map[string]*refSession)}
	return m
}

func (m *refMemoryStore) Append(ctx context.Context, events ...watchdog.Event) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", watchdog.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var batch map[refWindowKey]string
	if len(events) > 1 {
		batch = make(map[refWindowKey]string)
	}
	for _, e := range events {
		if _, dup := m.ids[e.ID]; dup || !e.Terminal() {
			continue
		}
		k := refWindowKey{e.AggregateID, e.Window}
		if _, ok := m.idx.Terminal(e.AggregateID, e.Window); ok {
			return fmt.Errorf("%w: session %q window %d already ended", watchdog.ErrAlreadyDecided, e.AggregateID, e.Window)
		}
		if prev, ok := batch[k]; ok && prev != e.ID {
			return fmt.Errorf("%w: two terminal events in one batch", watchdog.ErrAlreadyDecided)
		}
		if batch != nil {
			batch[k] = e.ID
		}
	}
	for _, e := range events {
		if _, dup := m.ids[e.ID]; dup {
			continue
		}
		m.seq++
		e.Seq = m.seq
		e.Extra = maps.Clone(e.Extra)
		m.ids[e.ID] = struct{}{}
		for s := range m.subs[e.AggregateID] {
			s.Push(e)
		}
		var term string
		if e.Terminal() {
			term = e.ID
		}
		m.idx.Add(e.AggregateID, e.Window, term, e.OccurredAt, m.add(e))
	}
	return nil
}

func (m *refMemoryStore) Load(ctx context.Context, aggregateID string) ([]watchdog.Event, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", watchdog.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]watchdog.Event, 0, m.idx.Len(aggregateID))
	m.idx.Each(aggregateID, func(p uint32) {
		e := *m.at(p)
		e.Extra = maps.Clone(e.Extra)
		out = append(out, e)
	})
	return out, nil
}

func (m *refMemoryStore) at(p uint32) *watchdog.Event { return &m.log[p/refChunk][p%refChunk] }

func (m *refMemoryStore) add(e watchdog.Event) uint32 {
	if m.logLen == len(m.log)*refChunk {
		m.log = append(m.log, make([]watchdog.Event, refChunk))
	}
	p := uint32(m.logLen)
	*m.at(p) = e
	m.logLen++
	return p
}

// refIndex is internal/retain's Index[uint32] as it was in commit b40d4a9,
// less what a Policy that keeps everything never runs.
type refIndex struct {
	sessions map[string]*refSession
	latest   time.Time
}

type refEntry struct {
	window int
	h      uint32
}

type refEnd struct {
	window int
	id     string
}

type refSession struct {
	entries []refEntry
	ended   []refEnd
	floor   int
	last    int
	endAt   time.Time
}

func (x *refIndex) Terminal(id string, window int) (string, bool) {
	s := x.sessions[id]
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

func (x *refIndex) Add(id string, window int, terminal string, at time.Time, h uint32) {
	if at.After(x.latest) {
		x.latest = at
	}
	s := x.sessions[id]
	if s == nil {
		s = &refSession{}
		x.sessions[id] = s
	}
	s.entries = append(s.entries, refEntry{window, h})
	if window > s.last {
		s.last, s.endAt = window, time.Time{}
	}
	if terminal != "" {
		i, _ := slices.BinarySearchFunc(s.ended, window, func(e refEnd, w int) int { return e.window - w })
		s.ended = slices.Insert(s.ended, i, refEnd{window, terminal})
		if window == s.last {
			s.endAt = x.latest
			if !at.IsZero() {
				s.endAt = at
			}
		}
	}
}

func (x *refIndex) Each(id string, fn func(uint32)) {
	if s := x.sessions[id]; s != nil {
		for _, e := range s.entries {
			fn(e.h)
		}
	}
}

func (x *refIndex) Len(id string) int {
	if s := x.sessions[id]; s != nil {
		return len(s.entries)
	}
	return 0
}
