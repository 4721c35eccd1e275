package watchdog

import (
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/stamps"
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
	last     atomic.Int64  // Unix ns of the latest evidence (coarse), or decide.Never
	count    atomic.Uint64 // distinct instants with evidence
	progress atomic.Uint64 // highest progress value seen
}

// Touch records evidence of work on channel ch at the current instant (at the
// Watchdog's evidence resolution). It is the hot path: lock-free, free of
// allocations, safe from any goroutine, cheap enough to call on every line of
// output. A channel outside the session's channels is ignored. Touching a
// session whose window has ended has no effect on any verdict.
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

func (s *Session) mark(c *chanState) {
	now := s.w.coarseNow()
	if c.last.Load() != now {
		c.last.Store(now)
		c.count.Add(1)
	}
}

// Progress records a heartbeat that carries a progress value (a sub-agent's
// step count, bytes written) on channel ch. It counts as evidence only when
// value exceeds every value recorded on ch before (the first counts if it is
// above zero), so a ticker that keeps pinging for a wedged worker does not
// keep it alive. It reports whether the heartbeat counted. Lock-free and free
// of allocations.
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
	for i, n := range builtinChannels {
		if n == name {
			return Channel(i), nil
		}
	}
	for i, n := range s.cfg.policy.Channels {
		if n == name {
			return Channel(len(builtinChannels) + i), nil
		}
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

// childWaits accounts the time a window spends waiting on children: the
// union of open waits, so nested and concurrent waits count once. Guarded by
// the Watchdog's lock.
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
	// Counter is how many distinct instants (at the evidence resolution)
	// the channel recorded evidence at: a lower bound of the number of
	// Touch calls.
	Counter uint64 `json:"counter"`
}

// snapshot reads the session for the decision. Called with w.mu held.
func (s *Session) snapshot() decide.Snapshot {
	return s.snapshotInto(make([]decide.Channel, s.numChannels()))
}

// snapshotLocked is snapshot with its channels in the Watchdog's scratch
// buffer: the result is valid only until w.mu is released or the next
// snapshotLocked. Called with w.mu held.
func (s *Session) snapshotLocked() decide.Snapshot {
	n := s.numChannels()
	if n > len(s.w.scratch) {
		return s.snapshot()
	}
	return s.snapshotInto(s.w.scratch[:n])
}

func (s *Session) snapshotInto(chs []decide.Channel) decide.Snapshot {
	for i := range chs {
		c := s.chanAt(Channel(i))
		chs[i] = decide.Channel{Last: s.w.coarse.Dated(c.last.Load()), Count: c.count.Load()}
	}
	r := s.r()
	var until time.Time
	for _, l := range r.bounded {
		end := l.deadline.Add(l.grace)
		if l.state == layerFired {
			end = time.Unix(0, l.item.Due) // the grace runs from the fire
		}
		if until.IsZero() || end.Before(until) {
			until = end
		}
	}
	var grace time.Time
	if s.evBuf[ChannelStdout].last.Load() == decide.Never {
		grace = r.graceUntil // the grace ends at the first output
	}
	return decide.Snapshot{
		BoundedWork:        len(r.bounded),
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
	}
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

// coarse is the Watchdog's evidence clock: a timestamp that Touch copies
// instead of reading a clock (internal/stamps). It ticks every resolution
// while evidence is being recorded and stops when none is, so an idle
// Watchdog costs no CPU. With the real clock it keeps the stamps' history by
// which the rules date evidence (see stamps.Clock.Dated).
type coarseClock struct {
	stamps.Clock
	ticking atomic.Bool
	touched atomic.Bool
	closed  atomic.Bool
	mu      sync.Mutex // guards timer
	timer   interface{ Stop() bool }

	hold atomic.Pointer[chan struct{}] // tests only: holds the ticks (a starved machine)
}

// refreshCoarse moves the evidence clock to t (on the timeline) if t is
// later; with the real clock it also remembers the stamp it replaced.
func (w *Watchdog) refreshCoarse(t int64) { w.coarse.Refresh(t, w.readNanos) }

// retainFor widens the stamps' history to cover what the rules of limits
// may look back at.
func (c *coarseClock) retainFor(l decide.Limits) {
	c.Retain(l.IdleWindow + l.EvidenceTTL + l.MaxIdleDeferral + l.StartupGrace +
		time.Duration(l.SettleChecks)*l.SettleInterval + time.Minute)
}

// coarseNow returns the evidence clock for Touch, starting its ticks if they
// are stopped.
func (w *Watchdog) coarseNow() int64 {
	c := &w.coarse
	if !c.ticking.Load() {
		w.startTicks()
	} else if !c.touched.Load() {
		c.touched.Store(true)
	}
	return c.Now()
}

func (w *Watchdog) startTicks() {
	c := &w.coarse
	if c.closed.Load() || !c.ticking.CompareAndSwap(false, true) {
		return
	}
	w.refreshCoarse(toNanos(w.now()))
	c.touched.Store(false)
	w.armTick()
}

func (w *Watchdog) armTick() {
	c := &w.coarse
	if c.closed.Load() {
		return
	}
	t := w.clock.AfterFunc(evidenceResolution, w.tick) // user code: never under the lock
	if t == nil {
		return
	}
	c.mu.Lock()
	c.timer = t
	closed := c.closed.Load()
	c.mu.Unlock()
	if closed { // stopTicks ran meanwhile: it may have missed t
		t.Stop()
	}
}

func (w *Watchdog) tick() {
	c := &w.coarse
	if g := c.hold.Load(); g != nil {
		<-*g // tests only: a tick that waits for a CPU
	}
	w.refreshCoarse(toNanos(w.now()))
	if c.touched.Swap(false) && !c.closed.Load() {
		w.armTick()
		return
	}
	c.ticking.Store(false)
}

func (w *Watchdog) stopTicks() {
	c := &w.coarse
	c.closed.Store(true)
	c.mu.Lock()
	t := c.timer
	c.timer = nil
	c.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}
