package watchdog

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// Channel identifies an evidence channel of a session: one of the four
// built-in channels, or one named in Policy.Channels (see Session.Channel).
type Channel int

// The built-in channels.
const (
	// ChannelStdout is the baseline: the agent's output. The idle rule
	// measures silence on this channel.
	ChannelStdout Channel = iota
	// ChannelMCPTool records tool calls and their completions.
	ChannelMCPTool
	// ChannelSubagent records delegated children's progress, tool calls and
	// heartbeats.
	ChannelSubagent
	// ChannelWorkspace records file changes in the session's workspace.
	ChannelWorkspace
)

var builtinChannels = []string{"stdout", "mcp_tool", "subagent", "workspace"}

// chanState is one channel's evidence. Written lock-free from any goroutine.
type chanState struct {
	last     atomic.Int64  // Unix ns on the timeline of the latest evidence, or decide.Never
	count    atomic.Uint64 // evidence recorded
	progress atomic.Uint64 // highest progress value seen
}

// Touch records evidence of work on channel ch, dated by a reading of the
// Watchdog's Clock. It is the hot path: lock-free, free of allocations,
// safe from any goroutine, cheap enough to call on every line of output
// (about the cost of a clock reading). A channel outside the session's
// channels is ignored. Touching an ended window affects no verdict.
func (s *Session) Touch(ch Channel) {
	if uint(ch) < uint(len(s.evBuf)) {
		s.mark(&s.evBuf[ch])
	} else if c := s.chanAt(ch); c != nil {
		s.mark(c)
	}
}

// chanAt returns channel ch's evidence, or nil for a channel the session
// does not have.
func (s *Session) chanAt(ch Channel) *chanState {
	if uint(ch) < uint(len(s.evBuf)) {
		return &s.evBuf[ch]
	}
	// The policy (immutable) says whether rare.evx exists: reading s.rare
	// is then safe without the lock (see newSession).
	if i := uint(ch) - uint(len(s.evBuf)); i < uint(len(s.cfg.policy.Channels)) {
		return &s.rare.evx[i]
	}
	return nil
}

// numChannels is the number of the session's evidence channels.
func (s *Session) numChannels() int {
	return len(s.evBuf) + len(s.cfg.policy.Channels)
}

// mark records evidence on c now. The latest instant only moves forward:
// of two concurrent marks, the later reading wins.
func (s *Session) mark(c *chanState) {
	now := s.w.nowNanos()
	for cur := c.last.Load(); now > cur && !c.last.CompareAndSwap(cur, now); cur = c.last.Load() {
	}
	c.count.Add(1)
}

// Progress records a heartbeat that carries a progress value (a sub-agent's
// step count, bytes written) on channel ch. It counts as evidence, and
// Progress reports true, only when value exceeds every value recorded on ch
// before (the first if above zero), so a ticker that keeps pinging for a
// wedged worker does not keep it alive. Lock-free and free of allocations.
func (s *Session) Progress(ch Channel, value uint64) bool {
	c := s.chanAt(ch)
	if c == nil {
		return false
	}
	for {
		p := c.progress.Load()
		if value <= p {
			return false
		}
		if c.progress.CompareAndSwap(p, value) {
			s.mark(c)
			return true
		}
	}
}

// Channel returns the channel named name: a built-in name ("stdout",
// "mcp_tool", "subagent", "workspace") or one of the policy's Channels.
func (s *Session) Channel(name string) (Channel, error) {
	if i := slices.Index(builtinChannels, name); i >= 0 {
		return Channel(i), nil
	}
	if i := slices.Index(s.cfg.policy.Channels, name); i >= 0 {
		return Channel(len(builtinChannels) + i), nil
	}
	return 0, fmt.Errorf("%w: session %q has no evidence channel %q", ErrInvalidArgument, s.id, name)
}

func (s *Session) channelName(i int) string {
	if i < len(builtinChannels) {
		return builtinChannels[i]
	}
	return s.cfg.policy.Channels[i-len(builtinChannels)]
}

// Writer returns an io.Writer that records evidence on ch for every non-empty
// write, then passes the bytes to w (or discards them when w is nil). Use it
// for exec.Cmd's Stdout and Stderr and for log pipes. It is as safe for
// concurrent use as w.
func (s *Session) Writer(ch Channel, w io.Writer) io.Writer {
	if w == nil {
		w = io.Discard
	}
	return &evidenceWriter{s: s, ch: ch, w: w}
}

type evidenceWriter struct {
	s  *Session
	ch Channel
	w  io.Writer
}

func (e *evidenceWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		e.s.Touch(e.ch)
	}
	return e.w.Write(p)
}

// childWaits is the time a window spends waiting on children: the union of
// open waits, so nested and concurrent ones count once. Guarded by w.mu.
type childWaits struct {
	open      int
	openSince time.Time
	closed    time.Duration
}

// BeginChildWait starts accounting a wait on children (a sub-agent, a tool
// subprocess) against Policy.ChildrenWaitCeiling, and arms the scheduler for
// the ceiling before it returns. Call end when the wait is over; calls
// after the first do nothing. Waits may nest and overlap: the ceiling counts
// the time during which at least one is open. Safe for concurrent use.
func (s *Session) BeginChildWait() (end func()) {
	w := s.w
	now := w.now()
	w.mu.Lock()
	cw := &s.rw().waits
	if cw.open == 0 {
		cw.openSince = now
	}
	cw.open++
	due := int64(math.MaxInt64)
	if c := s.cfg.limits.ChildWaitCeiling; c > 0 && s.state.Load() == stateRunning && !s.r().acting {
		due = toNanos(now.Add(c - cw.closed).Add(time.Nanosecond))
		w.pullInLocked(s, due)
	}
	w.mu.Unlock()
	if due != math.MaxInt64 {
		w.wakeBy(due)
	}
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			s.endChildWait()
		}
	}
}

// endChildWait closes one open wait on children.
func (s *Session) endChildWait() {
	w := s.w
	now := w.now()
	w.mu.Lock()
	cw := &s.rw().waits
	if cw.open--; cw.open == 0 {
		cw.closed += max(now.Sub(cw.openSince), 0)
		cw.openSince = time.Time{}
	}
	w.mu.Unlock()
}

// EvidenceEntry is one channel's evidence at a verdict, as recorded in
// Event.EvidenceSummary.
type EvidenceEntry struct {
	// Channel is the channel's name.
	Channel string `json:"channel"`
	// LastAt is the instant of the channel's latest evidence; nil if the
	// channel recorded none in this window. Its age at the verdict is the
	// event's OccurredAt minus LastAt (age_seconds in the JSON).
	LastAt *time.Time `json:"last_at"`
	// Counter is how many times the channel recorded evidence in the
	// window (each Touch, each write of a Writer, each Progress that
	// counted).
	Counter uint64 `json:"counter"`
}

// snapshot reads the session for a decision at now, a reading of the Clock
// taken before. It returns the decision's instant: now, or the latest
// evidence's instant if some evidence was dated after now (a Touch that
// read the Clock meanwhile), so that no evidence is dated after the
// verdict that reads it, nor before it happened. Called with w.mu held.
func (s *Session) snapshot(now time.Time) (decide.Snapshot, time.Time) {
	return s.snapshotInto(make([]decide.Channel, s.numChannels()), now)
}

// snapshotLocked is snapshot with its channels in the Watchdog's scratch
// buffer: the result is valid only until w.mu is released or the next
// snapshotLocked. Called with w.mu held.
func (s *Session) snapshotLocked(now time.Time) (decide.Snapshot, time.Time) {
	n := s.numChannels()
	if n > len(s.w.scratch) {
		return s.snapshot(now)
	}
	return s.snapshotInto(s.w.scratch[:n], now)
}

func (s *Session) snapshotInto(chs []decide.Channel, now time.Time) (decide.Snapshot, time.Time) {
	read := toNanos(now)
	latest := read
	for i := range chs {
		c := s.chanAt(Channel(i))
		chs[i] = decide.Channel{Last: c.last.Load(), Count: c.count.Load()}
		latest = max(latest, chs[i].Last)
	}
	r := s.r()
	var until time.Time
	for l := r.calls.Front(); l != nil; l = l.inCalls.Next() {
		if at := l.progAt.Load(); at > 0 {
			latest = max(latest, toNanos(l.limits(at).ProgressAt))
		}
		end := l.deadline.Add(l.grace)
		if l.state == layerFired {
			end = time.Unix(0, l.item.Due) // the grace runs from the fire
		}
		if until.IsZero() || end.Before(until) {
			until = end
		}
	}
	if latest != read {
		now = time.Unix(0, latest).UTC()
	}
	var grace time.Time
	if chs[ChannelStdout].Last == decide.Never {
		grace = r.graceUntil // the grace ends at the first output
	}
	return decide.Snapshot{
		BoundedWork:        r.calls.Len(),
		BoundedUntil:       until,
		Waiting:            r.waiter != nil || r.backingOff,
		SessionStartedAt:   s.sessionStartedAt,
		WindowStartedAt:    s.windowStartedAt,
		BudgetFrom:         s.budgetStart(),
		ObservedSince:      s.observedSince(),
		GraceUntil:         grace,
		Channels:           chs,
		ChildWait:          r.waits.closed,
		ChildWaitOpenSince: r.waits.openSince,
		State:              r.rules,
	}, now
}

// summary is the per-channel evidence summary of snapshot sn (at now, the
// event's instant). The entries and the instants they point to live in one
// allocation: for the built-in channels a summaryBlock, else two slices.
func (s *Session) summary(sn decide.Snapshot, now time.Time) []EvidenceEntry {
	var out []EvidenceEntry
	var lasts []time.Time
	if n := len(sn.Channels); n <= len(summaryBlock{}.entries) {
		b := new(summaryBlock)
		out, lasts = b.entries[:n], b.lasts[:n]
	} else {
		out, lasts = make([]EvidenceEntry, n), make([]time.Time, n)
	}
	for i, c := range sn.Channels {
		out[i] = EvidenceEntry{Channel: s.channelName(i), Counter: c.Count}
		if c.Last != decide.Never {
			lasts[i] = time.Unix(0, c.Last).UTC()
			out[i].LastAt = &lasts[i]
		}
	}
	return out
}

// summaryBlock holds the summary of the four built-in channels.
type summaryBlock struct {
	entries [4]EvidenceEntry
	lasts   [4]time.Time
}
