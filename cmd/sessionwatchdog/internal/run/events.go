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

// calls turns agent events into evidence and bounded handlers: a call in
// flight runs as watchdog.Call in a goroutine of its own, whose function
// returns when the call's end is read (or the turn ends, or the command
// ends), so the idle rule waits for it up to its cap, as for any Call.
type calls struct {
	ctx                  context.Context // the session's
	s                    *watchdog.Session
	toolCap, subagentCap time.Duration
	track                *tracker

	mu   sync.Mutex
	open map[string]*call
	wg   sync.WaitGroup
}

type call struct {
	name     string
	subagent bool
	end      chan struct{} // closed by the call's end
	endOnce  sync.Once
	finished chan struct{} // closed when Call has returned
	ctx      context.Context
	progress uint64
}

func newCalls(ctx context.Context, s *watchdog.Session, toolCap, subagentCap time.Duration, track *tracker) *calls {
	return &calls{ctx: ctx, s: s, toolCap: toolCap, subagentCap: subagentCap, track: track, open: map[string]*call{}}
}

// apply records the evidence of ev.
func (c *calls) apply(ev agentevents.Event) {
	switch ev.Kind {
	case agentevents.Unknown, agentevents.Output:
		c.track.touch(c.s, watchdog.ChannelStdout)
	case agentevents.SubagentOutput:
		c.track.touch(c.s, watchdog.ChannelSubagent)
	case agentevents.CallStart:
		c.start(ev.ID, ev.Name, ev.Subagent)
	case agentevents.CallUpdate:
		c.update(ev.ID)
	case agentevents.CallEnd:
		c.end(ev.ID, ev.Name, ev.Subagent)
	case agentevents.TurnEnd:
		c.endAll()
	}
}

// start runs the call id as a bounded handler, and returns once the
// handler is registered (its function runs).
func (c *calls) start(id, name string, subagent bool) {
	c.mu.Lock()
	if _, dup := c.open[id]; dup || len(c.open) >= maxCalls || c.ctx.Err() != nil {
		c.mu.Unlock()
		c.instant(subagent)
		return
	}
	cl := &call{name: name, subagent: subagent, end: make(chan struct{}), finished: make(chan struct{})}
	c.open[id] = cl
	c.mu.Unlock()
	budget := c.toolCap
	if subagent {
		budget = c.subagentCap
		c.track.touch(c.s, watchdog.ChannelSubagent)
	}
	running := make(chan struct{})
	var once sync.Once
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(cl.finished)
		c.track.callStarted()
		_ = watchdog.Call(c.ctx, name, budget, func(ctx context.Context) error {
			cl.ctx = ctx
			once.Do(func() { close(running) })
			select {
			case <-cl.end:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		once.Do(func() { close(running) }) // Call refused to run it
		c.track.callEnded(c.ctx.Err() == nil)
		c.mu.Lock()
		if c.open[id] == cl {
			delete(c.open, id)
		}
		c.mu.Unlock()
	}()
	<-running
}

// instant records a call that is not bounded: seen only once done, or
// beyond maxCalls.
func (c *calls) instant(subagent bool) {
	if subagent {
		c.track.touch(c.s, watchdog.ChannelSubagent)
	}
	c.track.touch(c.s, watchdog.ChannelMCPTool)
}

// update records progress of the call id: tool-call evidence
// (watchdog.Progress on the call's context), and sub-agent evidence for a
// sub-agent.
func (c *calls) update(id string) {
	c.mu.Lock()
	cl := c.open[id]
	c.mu.Unlock()
	if cl == nil {
		c.track.touch(c.s, watchdog.ChannelMCPTool)
		return
	}
	cl.progress++
	if watchdog.Progress(cl.ctx, cl.progress) {
		c.track.touched(watchdog.ChannelMCPTool)
	}
	if cl.subagent {
		c.track.touch(c.s, watchdog.ChannelSubagent)
	}
}

// end ends the call id, and returns once its Call has returned (its end is
// recorded as evidence). A call never started is an instant one.
func (c *calls) end(id, name string, subagent bool) {
	c.mu.Lock()
	cl := c.open[id]
	delete(c.open, id)
	c.mu.Unlock()
	if cl == nil {
		c.instant(subagent)
		return
	}
	cl.endOnce.Do(func() { close(cl.end) })
	<-cl.finished
	if cl.subagent {
		c.track.touch(c.s, watchdog.ChannelSubagent)
	}
}

// endAll ends every call in flight, and waits for them.
func (c *calls) endAll() {
	c.mu.Lock()
	open := c.open
	c.open = map[string]*call{}
	c.mu.Unlock()
	for _, cl := range open {
		cl.endOnce.Do(func() { close(cl.end) })
	}
	for _, cl := range open {
		<-cl.finished
	}
}

// wait ends every call in flight and waits for every Call goroutine.
func (c *calls) wait() {
	c.endAll()
	c.wg.Wait()
}
