package watchdog_test

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/relay"
	"github.com/sessionwatchdog/watchdog/internal/retain"
)

// refMemoryStore is the MemoryStore as it was before it kept compact
// records (commit b40d4a9), less its Subscribe method (Append still looks
// for subscribers): every event kept as a full Event. It is here only so that the benchmarks measure both in one
// run (BenchmarkMemoryStoreFire, BenchmarkMemoryStoreBytesPerEvent).
type refMemoryStore struct {
	mu     sync.Mutex
	seq    uint64
	log    [][]watchdog.Event
	logLen int
	dead   int
	idx    *retain.Index[uint32]
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
	m.idx = retain.New(retain.Policy{}, m.forget)
	return m
}

func (m *refMemoryStore) forget(p uint32) {
	e := m.at(p)
	delete(m.ids, e.ID)
	*e = watchdog.Event{}
	m.dead++
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
	if m.dead >= refChunk && m.dead >= m.logLen-m.dead {
		m.compact()
	}
	return nil
}

func (m *refMemoryStore) compact() {
	old := m.log
	m.log, m.logLen, m.dead = nil, 0, 0
	ids := make(map[string]struct{}, len(m.ids))
	m.idx.All(func(p *uint32) {
		e := &old[*p/refChunk][*p%refChunk]
		ids[e.ID] = struct{}{}
		*p = m.add(*e)
	})
	m.ids = ids
	m.idx.Shrink()
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
