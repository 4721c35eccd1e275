// Package einowatchdog puts a watchdog deadline on every tool call of an
// eino graph (github.com/cloudwego/eino): a per-tool cap and idle limit, as
// tool-call middleware for compose.ToolsNodeConfig.
//
//	conf := &compose.ToolsNodeConfig{
//		Tools:               tools,
//		ToolCallMiddlewares: []compose.ToolMiddleware{einowatchdog.Middleware(einowatchdog.Budgets{
//			Default: watchdog.CallLimits{Cap: 5 * time.Minute, Idle: 30 * time.Second},
//		})},
//	}
//
// An invokable tool runs as callWith(ctx, toolName, limits, ...):
// its context carries the limits (and a Deadline), and the tool reports
// progress with watchdog.Progress(ctx, n).
//
// A streamable tool's stream runs under the limits until it ends. Each chunk
// is progress, unless the budgets' progress function says it is not
// (Budgets.Progress): without one, keep-alives and empty chunks keep a
// stream alive until its cap. A stall or the cap ends the stream with the
// *watchdog.VerdictError as its last error, and cancels the tool's context,
// so that a tool that honours it stops producing. The time the graph takes
// to read the stream counts too (a reader slower than the tool's idle limit,
// with 16 chunks buffered, ends it), and a reader that closes the stream
// early is noticed at the next chunk. Enhanced tools (multimodal results)
// are guarded the same way.
//
// Inside a watched session the calls are tool-call evidence and their
// overruns are recorded (see watchdog.Begin), and with
// watchdog.WithCallRecords each call's end (a stream's: when it ends) is
// recorded as runtime.handler.completed; without a session they run on real
// timers.
package einowatchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/sessionwatchdog/watchdog"
)

// Budgets are the limits of tool calls, by tool name, and what counts as
// progress of a streamable tool. The zero value has no limits: every call
// fails (see Default).
type Budgets struct {
	// Default is the limits of a tool that is not in Tools. A tool call
	// with no limits (a zero Cap) fails with an error wrapping
	// watchdog.ErrInvalidArgument, rather than run unbounded.
	Default watchdog.CallLimits
	// Tools are the limits of each named tool.
	Tools map[string]watchdog.CallLimits
	// Progress says whether a chunk of the streamable tool named tool is
	// progress: only a chunk that is refreshes the call's idle limit, counts
	// in the progress its deadline record keeps, and is evidence on the
	// session. Every chunk is passed on to the reader either way. nil means
	// every chunk is progress, so a tool that sends keep-alives or empty
	// chunks keeps itself alive until its cap. It is called once per chunk,
	// in order, while the call runs, and concurrently for calls that run at
	// once. A panic in it ends the stream with an error naming the tool.
	Progress func(tool, chunk string) bool
	// EnhancedProgress is Progress for enhanced streamable tools, whose
	// chunks are *schema.ToolResult. nil means every chunk is progress.
	EnhancedProgress func(tool string, chunk *schema.ToolResult) bool
}

// progress returns the progress function of the tool named name, from f
// (nil if f is): a panic in f is its error.
func progress[T any](f func(string, T) bool, name string) func(T) (bool, error) {
	if f == nil {
		return nil
	}
	return func(c T) (ok bool, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("einowatchdog: the progress function of tool %q panicked: %v", name, p)
			}
		}()
		return f(name, c), nil
	}
}

func (b *Budgets) limits(name string) watchdog.CallLimits {
	if l, ok := b.Tools[name]; ok {
		return l
	}
	return b.Default
}

// Middleware returns the tool-call middleware that runs every invokable and
// streamable tool call under its tool's limits (the map is copied). It is
// safe for concurrent tool calls.
func Middleware(b Budgets) compose.ToolMiddleware {
	tools := make(map[string]watchdog.CallLimits, len(b.Tools))
	for k, v := range b.Tools {
		tools[k] = v
	}
	b.Tools = tools
	return compose.ToolMiddleware{
		Invokable: func(next compose.InvokableToolEndpoint) compose.InvokableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.ToolOutput, error) {
				return invoke(ctx, in, b.limits(in.Name), next)
			}
		},
		Streamable: func(next compose.StreamableToolEndpoint) compose.StreamableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.StreamToolOutput, error) {
				sr, err := guardStream(ctx, in, b.limits(in.Name), progress(b.Progress, in.Name), func(ctx context.Context) (*schema.StreamReader[string], error) {
					out, err := next(ctx, in)
					if err != nil || out == nil {
						return nil, err
					}
					return out.Result, nil
				})
				if err != nil {
					return nil, err
				}
				return &compose.StreamToolOutput{Result: sr}, nil
			}
		},
		EnhancedInvokable: func(next compose.EnhancedInvokableToolEndpoint) compose.EnhancedInvokableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.EnhancedInvokableToolOutput, error) {
				return invoke(ctx, in, b.limits(in.Name), next)
			}
		},
		EnhancedStreamable: func(next compose.EnhancedStreamableToolEndpoint) compose.EnhancedStreamableToolEndpoint {
			return func(ctx context.Context, in *compose.ToolInput) (*compose.EnhancedStreamableToolOutput, error) {
				sr, err := guardStream(ctx, in, b.limits(in.Name), progress(b.EnhancedProgress, in.Name), func(ctx context.Context) (*schema.StreamReader[*schema.ToolResult], error) {
					out, err := next(ctx, in)
					if err != nil || out == nil {
						return nil, err
					}
					return out.Result, nil
				})
				if err != nil {
					return nil, err
				}
				return &compose.EnhancedStreamableToolOutput{Result: sr}, nil
			}
		},
	}
}

// invoke runs an invokable tool call (plain or enhanced) under l.
func invoke[O any](ctx context.Context, in *compose.ToolInput, l watchdog.CallLimits, next func(context.Context, *compose.ToolInput) (*O, error)) (*O, error) {
	var out *O
	err := callWith(ctx, in.Name, l, func(cctx context.Context) error {
		var err error
		out, err = next(cctx, in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type item[T any] struct {
	chunk T
	err   error
}

// guardStream runs a streamable tool call and its stream under l: the call
// lasts until the stream ends. The caller reads a stream of its own, fed by
// the call, so that a stall ends it even while the tool's stream blocks.
// isProgress says whether a chunk is progress (nil: every chunk is); its
// error ends the stream.
func guardStream[T any](ctx context.Context, in *compose.ToolInput, l watchdog.CallLimits, isProgress func(T) (bool, error), open func(context.Context) (*schema.StreamReader[T], error)) (*schema.StreamReader[T], error) {
	out, w := schema.Pipe[T](16)
	var zero T
	opened := make(chan error, 1) // the endpoint's error, or nil once the stream flows
	go func() {
		defer w.Close()
		var streaming atomic.Bool // written by the call's goroutine, which an abandoning call leaves behind
		err := callWith(ctx, in.Name, l, func(cctx context.Context) error {
			src, err := open(cctx)
			if err != nil {
				return err
			}
			if src == nil {
				return errors.New("einowatchdog: the tool returned no stream")
			}
			streaming.Store(true)
			opened <- nil
			defer src.Close()
			items := make(chan item[T])
			go func() { // the tool's stream does not honour a context: read it apart
				for {
					c, err := src.Recv()
					select {
					case items <- item[T]{c, err}:
					case <-cctx.Done():
						return
					}
					if err != nil {
						return
					}
				}
			}()
			var n uint64
			for {
				select {
				case it := <-items:
					switch {
					case it.err == io.EOF:
						return nil
					case it.err != nil:
						w.Send(zero, it.err)
						return nil
					}
					counts := true
					if isProgress != nil {
						if counts, err = isProgress(it.chunk); err != nil {
							return err
						}
					}
					if counts {
						n++
						watchdog.Progress(cctx, n)
					}
					if w.Send(it.chunk, nil) {
						return nil // the reader closed its stream
					}
				case <-cctx.Done():
					return context.Cause(cctx)
				}
			}
		})
		switch {
		case !streaming.Load():
			opened <- err
		case err != nil:
			w.Send(zero, err)
		}
	}()
	if err := <-opened; err != nil {
		return nil, err
	}
	return out, nil
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
