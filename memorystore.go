package watchdog

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/sessionwatchdog/watchdog/internal/relay"
)

type windowKey struct {
	id     string
	window int
}

// MemoryStore is the embedded default EventStore: events live in memory, in
// append order. It implements Subscriber. Its zero value is not usable; call
// NewMemoryStore. All methods are safe for concurrent use.
type MemoryStore struct {
	mu       sync.Mutex
	seq      uint64
	log      [][]Event           // every event, in append order, in chunks of memChunk
	logLen   int                 // events in log
	events   map[string][]uint32 // each aggregate's positions in log, in append order
	ids      map[string]struct{}
	terminal map[windowKey]string // event id of the window's terminal event
	subs     map[string]map[*relay.Relay[Event]]struct{}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{
		events:   make(map[string][]uint32),
		ids:      make(map[string]struct{}),
		terminal: make(map[windowKey]string),
		subs:     make(map[string]map[*relay.Relay[Event]]struct{}),
	}
}

// Append implements EventStore.
func (m *MemoryStore) Append(ctx context.Context, events ...Event) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
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
	// Check the whole batch first so that a refusal appends nothing.
	var batch map[windowKey]string // only a batch of several can refuse itself
	if len(events) > 1 {
		batch = make(map[windowKey]string)
	}
	for _, e := range events {
		if _, dup := m.ids[e.ID]; dup || !e.Terminal() {
			continue
		}
		k := windowKey{e.AggregateID, e.Window}
		if prev, ok := m.terminal[k]; ok {
			return fmt.Errorf("%w: session %q window %d already ended by event %s", ErrAlreadyDecided, e.AggregateID, e.Window, prev)
		}
		if prev, ok := batch[k]; ok && prev != e.ID {
			return fmt.Errorf("%w: session %q window %d has two terminal events in one batch", ErrAlreadyDecided, e.AggregateID, e.Window)
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
		e.Extra = maps.Clone(e.Extra) // the caller may reuse its map
		m.ids[e.ID] = struct{}{}
		m.events[e.AggregateID] = append(m.events[e.AggregateID], m.add(e))
		if e.Terminal() {
			m.terminal[windowKey{e.AggregateID, e.Window}] = e.ID
		}
		for s := range m.subs[e.AggregateID] {
			s.Push(e)
		}
	}
	return nil
}

// Load implements EventStore. The returned slice is the caller's.
func (m *MemoryStore) Load(ctx context.Context, aggregateID string) ([]Event, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pos := m.events[aggregateID]
	out := make([]Event, len(pos))
	for i, p := range pos {
		out[i] = *m.at(p)
		out[i].Extra = maps.Clone(out[i].Extra) // the caller may change its copy
	}
	return out, nil
}

// memChunk is the number of events in one chunk of a MemoryStore's log. A
// chunked log never copies the events it holds as it grows, and a session's
// own list is of 4-byte positions, so a storm of fires does not regrow
// per-session lists of 500-byte events.
const memChunk = 1024

func (m *MemoryStore) at(p uint32) *Event { return &m.log[p/memChunk][p%memChunk] }

// add appends e to the log and returns its position. Called with m.mu held.
func (m *MemoryStore) add(e Event) uint32 {
	if m.logLen == len(m.log)*memChunk {
		m.log = append(m.log, make([]Event, memChunk))
	}
	p := uint32(m.logLen)
	*m.at(p) = e
	m.logLen++
	return p
}

// Subscribe implements Subscriber. Each subscription runs one goroutine that
// ends, and closes the channel, when ctx ends.
func (m *MemoryStore) Subscribe(ctx context.Context, aggregateID string) (<-chan Event, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := relay.New[Event]()
	m.mu.Lock()
	if m.subs[aggregateID] == nil {
		m.subs[aggregateID] = make(map[*relay.Relay[Event]]struct{})
	}
	m.subs[aggregateID][s] = struct{}{}
	m.mu.Unlock()
	go func() {
		defer func() {
			m.mu.Lock()
			delete(m.subs[aggregateID], s)
			if len(m.subs[aggregateID]) == 0 {
				delete(m.subs, aggregateID)
			}
			m.mu.Unlock()
		}()
		s.Run(ctx)
	}()
	return s.C(), nil
}
