package watchdog

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/sessionwatchdog/watchdog/internal/relay"
	"github.com/sessionwatchdog/watchdog/internal/retain"
)

type windowKey struct {
	id     string
	window int
}

// MemoryStore is the embedded default EventStore: events live in memory, in
// append order. It implements Subscriber. Its zero value is not usable; call
// NewMemoryStore or NewMemoryStoreWithRetention. All methods are safe for
// concurrent use.
//
// A MemoryStore from NewMemoryStore keeps every event as long as the store
// is referenced (about 0.5 to 1 KB per event); one from NewMemoryStoreWithRetention
// forgets ended sessions' history as its Retention says, and releases the
// memory they held.
type MemoryStore struct {
	mu     sync.Mutex
	seq    uint64
	log    [][]Event // every event kept, in chunks of memChunk; forgotten ones zeroed
	logLen int       // positions used in log
	dead   int       // forgotten events in log
	idx    *retain.Index[uint32]
	ids    map[string]struct{}
	subs   map[string]map[*relay.Relay[Event]]struct{}
}

// NewMemoryStore returns an empty MemoryStore that keeps every event.
func NewMemoryStore() *MemoryStore {
	m, _ := NewMemoryStoreWithRetention(Retention{})
	return m
}

// NewMemoryStoreWithRetention returns an empty MemoryStore that keeps what
// r says (see Retention): the zero Retention keeps every event, as
// NewMemoryStore does. A Retention with a negative field is an error
// wrapping ErrInvalidArgument that names it, and no store.
func NewMemoryStoreWithRetention(r Retention) (*MemoryStore, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	m := &MemoryStore{
		ids:  make(map[string]struct{}),
		subs: make(map[string]map[*relay.Relay[Event]]struct{}),
	}
	m.idx = retain.New(retain.Policy{Windows: r.KeepWindows, After: r.ForgetAfter}, m.forget)
	return m, nil
}

// forget releases the event at p, which the retention forgot. Called with
// m.mu held.
func (m *MemoryStore) forget(p uint32) {
	e := m.at(p)
	delete(m.ids, e.ID)
	*e = Event{}
	m.dead++
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
		if prev, ok := m.idx.Terminal(e.AggregateID, e.Window); ok {
			return endedError(e.AggregateID, e.Window, prev)
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
		for s := range m.subs[e.AggregateID] {
			s.Push(e)
		}
		var term string
		if e.Terminal() {
			term = e.ID
		}
		m.idx.Add(e.AggregateID, e.Window, term, e.OccurredAt, m.add(e))
	}
	if m.dead >= memChunk && m.dead >= m.logLen-m.dead {
		m.compact()
	}
	return nil
}

// endedError is the refusal of a terminal event for a window that has one
// (prev), or that the retention forgot (prev "").
func endedError(id string, window int, prev string) error {
	if prev == "" {
		return fmt.Errorf("%w: session %q window %d already ended (the store's retention has forgotten its events)", ErrAlreadyDecided, id, window)
	}
	return fmt.Errorf("%w: session %q window %d already ended by event %s", ErrAlreadyDecided, id, window, prev)
}

// compact moves the events kept to a new log, so that the chunks of
// forgotten ones are released: it runs when at least half of the log (and
// a chunk) is forgotten, so each event is moved a bounded number of times
// on average. Called with m.mu held.
func (m *MemoryStore) compact() {
	old := m.log
	m.log, m.logLen, m.dead = nil, 0, 0
	ids := make(map[string]struct{}, len(m.ids))
	m.idx.All(func(p *uint32) {
		e := &old[*p/memChunk][*p%memChunk]
		ids[e.ID] = struct{}{}
		*p = m.add(*e)
	})
	m.ids = ids // a map keeps the room of its largest size: start afresh
	m.idx.Shrink()
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
	out := make([]Event, 0, m.idx.Len(aggregateID))
	m.idx.Each(aggregateID, func(p uint32) {
		e := *m.at(p)
		e.Extra = maps.Clone(e.Extra) // the caller may change its copy
		out = append(out, e)
	})
	return out, nil
}

// memChunk is the number of events in one chunk of a MemoryStore's log. A
// chunked log never copies the events it holds as it grows, and a session's
// own list is of 16-byte entries (window and position), so a storm of
// fires does not regrow per-session lists of 500-byte events.
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
