// Package mcpwatchdog puts a watchdog deadline on every tool call an MCP
// client (github.com/modelcontextprotocol/go-sdk) makes: a per-tool cap and
// idle limit, with the server's progress notifications as the progress
// that refreshes the idle limit, but only when the progress value advances.
//
// Wire it into a client in two places:
//
//	g := mcpwatchdog.New(mcpwatchdog.Budgets{Default: watchdog.CallLimits{Cap: 5 * time.Minute, Idle: 30 * time.Second}})
//	client := mcp.NewClient(impl, &mcp.ClientOptions{ProgressNotificationHandler: g.ProgressHandler(nil)})
//	client.AddSendingMiddleware(g.Middleware())
//
// Each tools/call then runs as watchdog.CallWith(ctx, toolName, limits, ...):
// inside a watched session (ctx derives from Session.Context) the call is
// tool-call evidence on the session (ChannelMCPTool, at its start, at each
// advancing progress and at its end), the idle rule of the session waits for
// it, and an overrun is recorded as a runtime.handler.deadline_exceeded event
// (rule handler_idle or handler_deadline, with the last progress); without a
// session it runs on real timers. On a verdict the call's context is
// cancelled: the SDK then returns at once with the context's error (which
// CallWith turns into the *watchdog.VerdictError) and sends the server a
// notifications/cancelled message in the background, bounded by the SDK's
// own 5 s timeout. That delay never holds the caller: the handler grace
// period (Policy.HandlerGrace) only matters if the SDK call itself ignored
// its context, which it does not.
package mcpwatchdog

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sessionwatchdog/watchdog"
)

// Budgets are the limits of tool calls, by tool name.
type Budgets struct {
	// Default is the limits of a tool that is not in Tools. A tool call
	// with no limits (a zero Cap) is refused with an error wrapping
	// watchdog.ErrInvalidArgument, not sent unbounded.
	Default watchdog.CallLimits
	// Tools are the limits of each named tool.
	Tools map[string]watchdog.CallLimits
}

// Guard holds the budgets and the tool calls in flight. Its methods are
// safe for concurrent use; one Guard serves any number of clients.
type Guard struct {
	budgets Budgets
	seq     atomic.Uint64
	mu      sync.Mutex
	calls   map[callKey][]*context.Context // a client session's progress token -> the contexts of its calls in flight
}

// callKey names the calls a progress notification is for: its client
// session and its token, as text (a number the peer echoes back as a
// float64 names the same call as the integer sent).
type callKey struct {
	session *mcp.ClientSession
	token   string
}

func tokenKey(t any) string {
	switch v := t.(type) {
	case string:
		return "s:" + v
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<63 {
			return "n:" + strconv.FormatInt(int64(v), 10)
		}
		return "f:" + strconv.FormatFloat(v, 'g', -1, 64)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "n:" + fmt.Sprint(v)
	}
	return fmt.Sprintf("%T:%v", t, t)
}

// New returns a Guard with budgets b (the map is copied).
func New(b Budgets) *Guard {
	tools := make(map[string]watchdog.CallLimits, len(b.Tools))
	for k, v := range b.Tools {
		tools[k] = v
	}
	b.Tools = tools
	return &Guard{budgets: b, calls: map[callKey][]*context.Context{}}
}

// limits returns the limits of the tool named name.
func (g *Guard) limits(name string) watchdog.CallLimits {
	if l, ok := g.budgets.Tools[name]; ok {
		return l
	}
	return g.budgets.Default
}

// Middleware returns the client's sending middleware (add it with
// Client.AddSendingMiddleware): every tools/call runs under its tool's
// limits. A call without a progress token is sent with one (on a copy of
// its params), so that the server's progress notifications reach the Guard
// (see ProgressHandler). Notifications are matched to calls by client
// session and token; calls that share a token share its progress. Other
// methods pass through.
func (g *Guard) Middleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			cr, ok := req.(*mcp.ClientRequest[mcp.Params]) // what ClientSession.CallTool sends
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			p, ok := cr.Params.(*mcp.CallToolParams)
			if !ok || p == nil {
				return next(ctx, method, req)
			}
			token := p.GetProgressToken()
			if token == nil { // on a copy: the caller's params stay as they were
				cp, params := *cr, *p
				params.Meta = maps.Clone(p.Meta)
				token = fmt.Sprintf("watchdog-%d", g.seq.Add(1))
				params.SetProgressToken(token)
				cp.Params = &params
				req = &cp
			}
			key := callKey{cr.Session, tokenKey(token)}
			var res mcp.Result
			err := watchdog.CallWith(ctx, p.Name, g.limits(p.Name), func(cctx context.Context) error {
				entry := &cctx
				g.mu.Lock()
				g.calls[key] = append(g.calls[key], entry)
				g.mu.Unlock()
				defer func() {
					g.mu.Lock()
					rest := slices.DeleteFunc(g.calls[key], func(e *context.Context) bool { return e == entry })
					if len(rest) == 0 {
						delete(g.calls, key)
					} else {
						g.calls[key] = rest
					}
					g.mu.Unlock()
				}()
				var err error
				res, err = next(cctx, method, req)
				return err
			})
			if err != nil {
				return nil, err
			}
			return res, nil
		}
	}
}

// ProgressHandler returns the client's ProgressNotificationHandler (see
// mcp.ClientOptions): a progress notification of a guarded tool call is
// progress of that call (watchdog.Progress) when its value exceeds every
// value before it, so a server that repeats the same value keeps nothing
// alive. next, if not nil, is called with every notification.
func (g *Guard) ProgressHandler(next func(context.Context, *mcp.ProgressNotificationClientRequest)) func(context.Context, *mcp.ProgressNotificationClientRequest) {
	return func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
		if req != nil && req.Params != nil && req.Params.Progress > 0 && !math.IsInf(req.Params.Progress, 0) {
			p := req.Params
			g.mu.Lock()
			calls := slices.Clone(g.calls[callKey{req.Session, tokenKey(p.ProgressToken)}])
			g.mu.Unlock()
			// Non-negative floats order as their bits do: progress 0.5 <
			// 0.75 < 1 < 2 as values that Progress compares.
			for _, cctx := range calls {
				watchdog.Progress(*cctx, math.Float64bits(p.Progress))
			}
		}
		if next != nil {
			next(ctx, req)
		}
	}
}
