package watchdog

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sessionwatchdog/watchdog/internal/memlog"
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
// is referenced, as a compact record: about 100 bytes for each event of a
// fire, 210 for the start event that opens a session's index (on 64-bit
// platforms); one from NewMemoryStoreWithRetention forgets ended sessions'
// history as its Retention says, and releases the memory they held.
type MemoryStore struct {
	mu     sync.Mutex
	seq    uint64
	log    *memlog.Log // every event kept, as a compact record (see recordFields)
	idx    *retain.Index[uint64]
	subs   map[string]map[*relay.Relay[Event]]struct{}
	policy atomic.Pointer[Policy] // a copy of the last policy validated
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
	if err := r.check(); err != nil {
		return nil, err
	}
	m := &MemoryStore{log: memlog.New(), subs: make(map[string]map[*relay.Relay[Event]]struct{})}
	m.idx = retain.New(r.policy(), m.log.Drop)
	return m, nil
}

// recordFields lists the fields of an event that its record keeps (see
// memlog): all but ID and Seq, which every record has, and AggregateID,
// which Load knows. The fields most events set come first.
func recordFields(c *memlog.Codec, e *Event) {
	c.Times(&e.OccurredAt, &e.SessionStartedAt, &e.WindowStartedAt, &e.FiredAt, &e.ObservedSince)
	c.Strs(&e.Kind, &e.Reason, &e.Rule, (*string)(&e.Mode), &e.ActiveChannel, &e.Owner)
	c.Floats(&e.ElapsedSeconds, &e.ConfiguredBudgetSeconds, &e.MeasureSeconds, &e.LimitSeconds)
	c.Ints(&e.Window)
	c.BoolPtr(&e.Recoverable)
	c.IDs(&e.DecidedByDecisionID)
	memlog.Slice(c, &e.EvidenceSummary, func(c *memlog.Codec, en *EvidenceEntry) {
		c.Strs(&en.Channel)
		c.TimePtr(&en.LastAt)
		c.Uints(&en.Counter)
	})
	memlog.Ref(c, &e.Policy, e.Policy != nil)
	c.Times(&e.GraceUntil, &e.ProgressAt, &e.OwnerLastSeen, &e.BudgetFrom, &e.StopAt)
	c.Strs(&e.Handler, &e.Layer, &e.AdoptedFrom, &e.StopRule)
	c.Texts(&e.DyingSpan, &e.Error, &e.By, &e.Why)
	c.Floats(&e.ChildrenWaitSeconds)
	c.Ints(&e.SettleCount, &e.SettleChecks, &e.Attempt, &e.ProcessesAlive, &e.HandlersInFlight)
	c.Uints(&e.ProgressValue, &e.Generation)
	c.Bools(&e.Waiting, &e.OpensWindow)
	c.Bytes((*[]byte)(&e.Payload))
	memlog.Slice(c, &e.CallsInFlight, func(c *memlog.Codec, f *CallInFlight) {
		c.Strs(&f.Name, (*string)(&f.Layer))
		c.Times(&f.StartedAt, &f.ProgressAt)
		c.Floats(&f.BudgetSeconds, &f.IdleSeconds, &f.FirstProgressSeconds)
		c.Uints(&f.Progress)
	})
	memlog.Ref(c, &e.Extra, e.Extra != nil)
}

// validate is e.Validate, but for a policy the same as the last one
// validated, not validated again: a policy's validity is its value's.
func (m *MemoryStore) validate(e *Event) error {
	fresh := e.Policy != nil && (m.policy.Load() == nil || !e.Policy.same(m.policy.Load()))
	err := e.check(fresh)
	if err == nil && fresh {
		p := e.Policy.clone()
		m.policy.Store(&p)
	}
	return err
}

// Append implements EventStore.
func (m *MemoryStore) Append(ctx context.Context, events ...Event) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range events {
		if err := m.validate(&events[i]); err != nil {
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
	for i := range events {
		e := &events[i]
		if !e.Terminal() || m.log.Has(e.ID) {
			continue
		}
		if prev, ok := m.idx.Terminal(e.AggregateID, e.Window); ok {
			return endedError(e.AggregateID, e.Window, prev)
		}
		if prev, ok := batch[windowKey{e.AggregateID, e.Window}]; ok && prev != e.ID {
			return fmt.Errorf("%w: session %q window %d has two terminal events in one batch", ErrAlreadyDecided, e.AggregateID, e.Window)
		}
		if batch != nil {
			batch[windowKey{e.AggregateID, e.Window}] = e.ID
		}
	}
	for _, e := range events {
		c := m.log.Write(e.ID)
		if c == nil { // held: a retry
			continue
		}
		m.seq++
		e.Seq, e.Extra = m.seq, maps.Clone(e.Extra) // the caller may reuse its map
		recordFields(c, &e)
		for s := range m.subs[e.AggregateID] {
			s.Push(e)
		}
		var term string
		if e.Terminal() {
			term = strings.Clone(e.ID) // not the larger string it may be part of
		}
		m.idx.Add(e.AggregateID, e.Window, term, e.OccurredAt, m.log.Commit(e.Seq))
	}
	m.log.Compact(m.idx)
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
	m.idx.Each(aggregateID, func(h uint64) {
		out = append(out, Event{AggregateID: aggregateID})
		e := &out[len(out)-1]
		e.ID, e.Seq = memlog.Read(m.log, h, e, recordFields)
		e.Extra = maps.Clone(e.Extra) // the caller may change its copy
	})
	return out, nil
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
