//go:build unix

package run

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/agentevents"
)

// maxLine is the longest line the event writer parses; the rest of a longer
// line is passed through and counted as output, unparsed.
const maxLine = 4 << 20

// maxCalls is how many calls may be in flight at once; a call beyond it is
// counted as tool-call evidence, without bounding it.
const maxCalls = 256

// eventWriter passes every byte written to it on to out unchanged, and
// reads the lines as agent events: the evidence is recorded before the
// bytes are passed on. One goroutine writes to it (exec.Cmd's copy of the
// pipe); Flush reads a last line that has no newline.
type eventWriter struct {
	out    io.Writer
	parser agentevents.Parser
	calls  *calls
	buf    []byte
	over   bool // the current line passed maxLine: counted already
}

func (e *eventWriter) Write(p []byte) (int, error) {
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		if !e.over {
			if len(e.buf)+len(part) > maxLine {
				e.over, e.buf = true, e.buf[:0]
				e.calls.apply(agentevents.Event{Kind: agentevents.Unknown})
			} else {
				e.buf = append(e.buf, part...)
			}
		}
		if i < 0 {
			break
		}
		e.line()
		rest = rest[i+1:]
	}
	return e.out.Write(p)
}

// line ends the current line.
func (e *eventWriter) line() {
	if !e.over {
		line := bytes.TrimSuffix(e.buf, []byte("\r"))
		if len(bytes.TrimSpace(line)) > 0 {
			for _, ev := range e.parser.Parse(line) {
				e.calls.apply(ev)
			}
		}
	}
	e.buf, e.over = e.buf[:0], false
}

// Flush reads the last line if it has no newline.
func (e *eventWriter) Flush() {
	if len(e.buf) > 0 || e.over {
		e.line()
	}
}

// calls turns agent events into evidence and bounded calls: a call in
// flight is a watchdog.CallHandle begun at its start event and ended at
// its end event (or when the turn ends, or the command ends), so the idle
// rule waits for it up to its cap. A sub-agent's call counts on the
// sub-agent channel, a tool call on the tool channel.
type calls struct {
	ctx                  context.Context // the session's
	s                    *watchdog.Session
	toolCap, subagentCap time.Duration

	mu   sync.Mutex
	open map[string]*call
}

type call struct {
	h        *watchdog.CallHandle
	progress uint64 // guarded by calls.mu
}

func newCalls(ctx context.Context, s *watchdog.Session, toolCap, subagentCap time.Duration) *calls {
	return &calls{ctx: ctx, s: s, toolCap: toolCap, subagentCap: subagentCap, open: map[string]*call{}}
}

// channel is the evidence channel of a call.
func channel(subagent bool) watchdog.Channel {
	if subagent {
		return watchdog.ChannelSubagent
	}
	return watchdog.ChannelMCPTool
}

// apply records the evidence of ev.
func (c *calls) apply(ev agentevents.Event) {
	switch ev.Kind {
	case agentevents.Unknown, agentevents.Output:
		c.s.Touch(watchdog.ChannelStdout)
	case agentevents.SubagentOutput:
		c.s.Touch(watchdog.ChannelSubagent)
	case agentevents.CallStart:
		c.start(ev.ID, ev.Name, ev.Subagent)
	case agentevents.CallUpdate:
		c.update(ev.ID)
	case agentevents.CallEnd:
		c.end(ev.ID, ev.Subagent)
	case agentevents.TurnEnd:
		c.endAll()
	}
}

// start begins the call id as a bounded call.
func (c *calls) start(id, name string, subagent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.open[id]; dup || len(c.open) >= maxCalls {
		c.s.Touch(channel(subagent)) // evidence, not bounded
		return
	}
	budget := c.toolCap
	if subagent {
		budget = c.subagentCap
	}
	h, err := watchdog.Begin(c.ctx, name, watchdog.CallLimits{Cap: budget, Channel: channel(subagent)})
	if err != nil { // the session has ended
		return
	}
	c.open[id] = &call{h: h}
}

// update records progress of the call id (evidence on its channel), or
// tool-call evidence for a call not in flight.
func (c *calls) update(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.open[id]
	if cl == nil {
		c.s.Touch(watchdog.ChannelMCPTool)
		return
	}
	cl.progress++
	watchdog.Progress(cl.h.Context(), cl.progress)
}

// end ends the call id (its end is evidence on its channel). A call never
// begun is an instant one: evidence.
func (c *calls) end(id string, subagent bool) {
	c.mu.Lock()
	cl := c.open[id]
	delete(c.open, id)
	c.mu.Unlock()
	if cl == nil {
		c.s.Touch(channel(subagent))
		return
	}
	_ = cl.h.End(nil)
}

// endAll ends every call in flight.
func (c *calls) endAll() {
	c.mu.Lock()
	open := c.open
	c.open = map[string]*call{}
	c.mu.Unlock()
	for _, cl := range open {
		_ = cl.h.End(nil)
	}
}

// wait ends every call in flight.
func (c *calls) wait() { c.endAll() }
