//go:build unix

package run

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"sync"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/agentevents"
	"github.com/sessionwatchdog/watchdog/lines"
)

// maxCalls is how many calls may be in flight at once; a call beyond it is
// counted as evidence on its channel, without bounding it.
const maxCalls = 256

// eventWriter passes every byte written to it on to out unchanged, and
// reads the lines as agent events as they arrive, in pieces: no line is
// held (the parser's memory is agentevents.MemoryBound whatever a line's
// length), so a call ends as soon as the last byte of its result line is
// read. The evidence is recorded before the bytes are passed on. One
// goroutine writes to it (exec.Cmd's copy of the pipe); Flush reads a last
// line that has no newline.
type eventWriter struct {
	out    io.Writer
	parser *agentevents.Parser
	calls  *calls
	// recent, with --stdout lines, holds the hashes of the last distinct
	// lines that are not events: such a line that repeats one of them is
	// not evidence (a heartbeat beside the stream). Nil: every line is.
	recent  *recentLines
	h       maphash.Hash
	pending bool // the current line has bytes
	said    bool // a line of output was read in this Write: one touch for them all
}

// recentLines remembers the hashes of the last lines.DefaultRecent
// distinct lines.
type recentLines struct {
	last []uint64
	next int
}

// fresh reports whether sum is none of the last distinct lines, and
// remembers it.
func (r *recentLines) fresh(sum uint64) bool {
	for _, x := range r.last {
		if x == sum {
			return false
		}
	}
	if len(r.last) < lines.DefaultRecent {
		r.last = append(r.last, sum)
	} else {
		r.last[r.next] = sum
		r.next = (r.next + 1) % lines.DefaultRecent
	}
	return true
}

func (e *eventWriter) Write(p []byte) (int, error) {
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if len(part) > 0 {
			e.parser.Write(part)
			if e.recent != nil {
				e.h.Write(part)
			}
			e.pending = true
		}
		if i < 0 {
			break
		}
		e.line()
		rest = rest[i+1:]
	}
	e.flushSaid()
	return e.out.Write(p)
}

// flushSaid records the output lines read as evidence on stdout: one
// touch for the lines of one write, which arrived at the same instant.
func (e *eventWriter) flushSaid() {
	if e.said {
		e.said = false
		e.calls.s.Touch(watchdog.ChannelStdout)
	}
}

// line ends the current line.
func (e *eventWriter) line() {
	evs := e.parser.End()
	repeat := false
	if e.recent != nil {
		if e.pending {
			repeat = !e.recent.fresh(e.h.Sum64())
		}
		e.h.Reset()
	}
	e.pending = false
	for _, ev := range evs {
		switch ev.Kind {
		case agentevents.Unknown:
			e.said = e.said || !repeat // a repeated line that is not an event is not work
			continue
		case agentevents.Output:
			e.said = true
		default:
			e.flushSaid() // before a call's evidence, as the line came first
		}
		e.calls.apply(ev)
	}
}

// Flush reads the last line if it has no newline.
func (e *eventWriter) Flush() {
	if e.pending {
		e.line()
	}
	e.flushSaid()
}

// calls turns agent events into evidence and bounded calls: a call in
// flight is a watchdog.CallHandle, begun when its start is read and ended
// when its end is read (failed when the stream says so), or when the turn
// ends, or when the command ends; the idle rule waits for it up to its
// cap. A tool call counts on ChannelMCPTool, a sub-agent on
// ChannelSubagent. A background call (Claude Code's background task) and
// the calls started from inside it outlive the turn: only their own end,
// their cap, or the command's end ends them.
//
// When a turn has ended and no call is in flight for postTurn, finished
// is called (once per such quiet spell): the agent is done but has not
// exited. Any output of the agent itself, or a call it starts, ends the
// spell.
type calls struct {
	ctx                  context.Context // the session's
	toolCap, subagentCap time.Duration
	s                    *watchdog.Session
	postTurn             time.Duration // 0: never
	finished             func()

	// The books: only the goroutine that applies events uses them (and
	// wait, once it is done).
	open     map[string]*call
	byParent map[string]string // a background call's Parent -> its id
	turnDone bool              // a turn ended, and the agent said nothing since
	armed    bool              // the post-turn timer runs

	mu    sync.Mutex
	timer *time.Timer    // armed while turnDone and no call is in flight
	gen   int            // the current arming; a timer of an older one does nothing
	fires sync.WaitGroup // a timer armed and not stopped: wait waits for its func
}

type call struct {
	h          *watchdog.CallHandle
	ch         watchdog.Channel
	background bool
	parent     string
	progress   uint64
}

func newCalls(ctx context.Context, s *watchdog.Session, toolCap, subagentCap time.Duration) *calls {
	return &calls{ctx: ctx, s: s, toolCap: toolCap, subagentCap: subagentCap,
		open: map[string]*call{}, byParent: map[string]string{}}
}

// apply records the evidence of ev.
func (c *calls) apply(ev agentevents.Event) {
	switch ev.Kind {
	case agentevents.Unknown:
		c.s.Touch(watchdog.ChannelStdout)
	case agentevents.Output: // its evidence is the writer's (one touch a write)
		c.turnDone = false
	case agentevents.SubagentOutput:
		c.subagentOutput(ev.ID)
	case agentevents.CallStart:
		c.start(ev)
		if ev.Parent == "" && !ev.Background {
			c.turnDone = false
		}
	case agentevents.CallUpdate:
		c.update(ev.ID)
	case agentevents.CallEnd:
		c.end(ev)
	case agentevents.TurnEnd:
		c.endTurn()
		c.turnDone = true
	}
	c.rearm()
}

// limits are the cap and the evidence channel of a call.
func (c *calls) limits(subagent bool) watchdog.CallLimits {
	if subagent {
		return watchdog.CallLimits{Cap: c.subagentCap, Channel: watchdog.ChannelSubagent}
	}
	return watchdog.CallLimits{Cap: c.toolCap, Channel: watchdog.ChannelMCPTool}
}

// start begins the call ev.ID. A start of a call already in flight is its
// progress.
func (c *calls) start(ev agentevents.Event) {
	_, dup := c.open[ev.ID]
	full := len(c.open) >= maxCalls
	l := c.limits(ev.Subagent)
	switch {
	case dup:
		c.update(ev.ID)
		return
	case full || c.ctx.Err() != nil:
		c.s.Touch(l.Channel)
		return
	}
	h, err := watchdog.Begin(c.ctx, ev.Name, l)
	if err != nil { // the session ended meanwhile
		c.s.Touch(l.Channel)
		return
	}
	c.open[ev.ID] = &call{h: h, ch: l.Channel, background: ev.Background, parent: ev.Parent}
	if ev.Background && ev.Parent != "" {
		c.byParent[ev.Parent] = ev.ID
	}
}

// take removes the call id from the books and returns it (nil if none).
func (c *calls) take(id string) *call {
	cl := c.open[id]
	if cl == nil {
		return nil
	}
	delete(c.open, id)
	if cl.background && c.byParent[cl.parent] == id {
		delete(c.byParent, cl.parent)
	}
	return cl
}

// update records progress of the call id (evidence on its channel).
func (c *calls) update(id string) {
	cl := c.open[id]
	if cl == nil {
		c.s.Touch(watchdog.ChannelMCPTool)
		return
	}
	c.progressed(cl)
}

// progressed counts one step of the call cl (one goroutine applies
// events: cl.progress needs no lock).
func (c *calls) progressed(cl *call) {
	cl.progress++
	watchdog.Progress(cl.h.Context(), cl.progress)
}

// subagentOutput records a line written inside the sub-agent that the
// call id runs (or that the background call launched by id runs):
// progress of that call, evidence on the sub-agent channel.
func (c *calls) subagentOutput(id string) {
	cl := c.open[id]
	if task, ok := c.byParent[id]; ok {
		cl = c.open[task]
	}
	if cl != nil && cl.ch == watchdog.ChannelSubagent {
		c.progressed(cl)
		return
	}
	c.s.Touch(watchdog.ChannelSubagent)
}

// end ends the call ev.ID, failed if the stream says so. A call never
// started is begun and ended at once: recorded all the same.
func (c *calls) end(ev agentevents.Event) {
	var err error
	if ev.Failed {
		err = fmt.Errorf("the agent reported the call failed (%s)", ev.Status)
	}
	cl := c.take(ev.ID)
	if cl == nil {
		l := c.limits(ev.Subagent)
		h, berr := watchdog.Begin(c.ctx, agentevents.CleanName(ev.Name), l)
		if berr != nil {
			c.s.Touch(l.Channel)
			return
		}
		cl = &call{h: h, ch: l.Channel}
	}
	_ = cl.h.End(err)
}

// endTurn ends every call in flight but the background ones and the calls
// started from inside them: the turn's end is theirs (the stream will not
// say how they ended: they end as succeeded).
func (c *calls) endTurn() {
	var ended []*call
	for id, cl := range c.open {
		if cl.background {
			continue
		}
		if _, inTask := c.byParent[cl.parent]; inTask && cl.parent != "" {
			continue
		}
		delete(c.open, id)
		ended = append(ended, cl)
	}
	for _, cl := range ended {
		_ = cl.h.End(nil)
	}
}

// rearm arms the post-turn timer when a turn has ended and no call is in
// flight, and disarms it otherwise.
func (c *calls) rearm() {
	if c.postTurn <= 0 || c.finished == nil {
		return
	}
	quiet := c.turnDone && len(c.open) == 0
	if quiet == c.armed {
		return
	}
	c.armed = quiet
	c.mu.Lock()
	defer c.mu.Unlock()
	c.disarmLocked()
	if quiet {
		gen := c.gen
		c.fires.Add(1)
		c.timer = time.AfterFunc(c.postTurn, func() {
			defer c.fires.Done()
			c.mu.Lock()
			fire := gen == c.gen
			c.mu.Unlock()
			if fire {
				c.finished()
			}
		})
	}
}

func (c *calls) disarmLocked() {
	if c.timer != nil {
		if c.timer.Stop() {
			c.fires.Done() // its func will not run
		}
		c.timer = nil
	}
	c.gen++
}

// wait ends every call in flight, the command having ended, and returns
// once no post-turn func runs or will.
func (c *calls) wait() {
	c.mu.Lock()
	c.disarmLocked()
	c.mu.Unlock()
	c.fires.Wait() // a func that had started has returned
	c.armed = false
	open := c.open
	c.open, c.byParent = map[string]*call{}, map[string]string{}
	for _, cl := range open {
		_ = cl.h.End(nil)
	}
}
