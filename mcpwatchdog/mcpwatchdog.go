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
// Each tools/call then runs as callWith(ctx, toolName, limits, ...).
// Inside a watched session (ctx derives from Session.Context):
//
//   - the call is tool-call evidence on the session (ChannelMCPTool) at its
//     start, at each progress notification whose value advances, and at its
//     end; a notification that repeats the last value is not evidence;
//   - the session's idle rule waits for the call while it runs;
//   - an overrun is recorded as a runtime.handler.deadline_exceeded event
//     (rule handler_idle or handler_deadline, with the last progress);
//   - a call running at a session verdict is listed in the verdict's
//     calls_in_flight, with its start, limits and last progress;
//   - with watchdog.WithCallRecords on the Watchdog, each call's end is
//     recorded as a runtime.handler.completed event: the tool's name, how it
//     ended ("ok", "error", or the deadline's reason), how long it ran (its
//     start is the event's instant minus that) and its last progress.
//
// A progress value is recorded as its float64's bits (math.Float64frombits
// reads it back). Without a session the call runs on real timers and
// nothing is recorded.
//
// # Cancelling a call, and the handler grace
//
// On a verdict the call's context is cancelled. By default (go-sdk v1.8.0,
// the version this module requires) the SDK then
// retires the call and returns at once with the context's error (which
// the call turns into the *watchdog.VerdictError), and sends the server its
// notifications/cancelled message in the background, bounded by the SDK's
// own 5 s timeout: a slow or unresponsive peer does not hold the caller.
//
// With MCPGODEBUG=blockingcancelnotify=1 in the environment (the SDK reads
// it once, at start-up), the SDK instead holds the cancelled call until that
// notification is delivered, for up to the same 5 s. The caller then gets
// the verdict up to 5 s after it was decided, and the handler grace
// (Policy.HandlerGrace: how long a call may take to return after its
// deadline, default 5 s, as long as the SDK's timeout) may run out first: the
// call is then recorded as abandoned (runtime.handler.abandoned, counted in
// Watchdog.Stats().AbandonedHandlers) although the SDK's goroutine returns
// when its 5 s end. With that setting, set HandlerGrace above 5 s (6 s, say)
// so that a peer that is slow to take the notification is not taken for a
// call that ignores its context; a shorter grace returns the verdict to the
// caller sooner, at the cost of the abandoned record. Without a session the
// grace is 5 s and cannot be set: the caller gets the verdict at most 5 s
// late.
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
			err := callWith(ctx, p.Name, g.limits(p.Name), func(cctx context.Context) error {
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
// alive: only a value that advances refreshes the call's idle limit and is
// evidence on the session's tool channel. A value that is not positive and
// finite is never progress. next, if not nil, is called with every
// notification.
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

// callWith runs fn as the call name under l: watchdog.Begin, then Run (the
// function form, which abandons fn past its grace if it ignores its
// context).
func callWith(ctx context.Context, name string, l watchdog.CallLimits, fn func(context.Context) error) error {
	h, err := watchdog.Begin(ctx, name, l)
	if err != nil {
		return err
	}
	return h.Run(fn)
}
