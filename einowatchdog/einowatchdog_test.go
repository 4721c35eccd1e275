package einowatchdog_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/einowatchdog"
)

// invokable is an invokable tool that reports progress steps 100 ms apart
// (the same value again if repeat), then answers; steps < 0 means forever.
type invokable struct {
	name   string
	steps  int
	repeat bool
}

func (t invokable) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: t.name, Desc: t.name}, nil
}

func (t invokable) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	for i := 1; t.steps < 0 || i <= t.steps; i++ {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
		v := uint64(i)
		if t.repeat {
			v = 1
		}
		watchdog.Progress(ctx, v)
	}
	return "done", nil
}

// streamable is a streamable tool that sends chunks ("x") 100 ms apart,
// then ends, or stalls (sends nothing more and never closes its stream,
// until its context ends), or keeps sending chunks ("x") or keep-alives
// (empty chunks) 100 ms apart until its context ends.
type streamable struct {
	name   string
	chunks int
	then   string // "" (end), "stall", "chunks" or "keep-alives"
}

func (t streamable) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: t.name, Desc: t.name}, nil
}

func (t streamable) StreamableRun(ctx context.Context, _ string, _ ...tool.Option) (*schema.StreamReader[string], error) {
	r, w := schema.Pipe[string](0)
	go func() {
		defer w.Close()
		for i := 0; i < t.chunks || t.then == "chunks" || t.then == "keep-alives"; i++ {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return // a tool that honours its context stops when the guard gives up
			}
			chunk := "x"
			if i >= t.chunks && t.then == "keep-alives" {
				chunk = ""
			}
			if w.Send(chunk, nil) {
				return
			}
		}
		if t.then == "stall" {
			<-ctx.Done()
		}
	}()
	return r, nil
}

var budgets = einowatchdog.Budgets{
	Default: watchdog.CallLimits{Cap: 5 * time.Second, Idle: 300 * time.Millisecond},
	Tools:   map[string]watchdog.CallLimits{"endless": {Cap: time.Second, Idle: 300 * time.Millisecond}},
}

// chain is a real eino graph: a tools node with the middleware, under
// budgets.
func chain(t *testing.T, tools ...tool.BaseTool) compose.Runnable[*schema.Message, []*schema.Message] {
	t.Helper()
	return chainWith(t, budgets, tools...)
}

// chainWith is chain under b.
func chainWith(t *testing.T, b einowatchdog.Budgets, tools ...tool.BaseTool) compose.Runnable[*schema.Message, []*schema.Message] {
	t.Helper()
	ctx := context.Background()
	tn, err := compose.NewToolNode(ctx, &compose.ToolsNodeConfig{Tools: tools, ToolCallMiddlewares: []compose.ToolMiddleware{einowatchdog.Middleware(b)}})
	require.NoError(t, err)
	r, err := compose.NewChain[*schema.Message, []*schema.Message]().AppendToolsNode(tn).Compile(ctx)
	require.NoError(t, err)
	return r
}

func call(name string) *schema.Message {
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "c1", Function: schema.FunctionCall{Name: name, Arguments: "{}"}}})
}

func verdict(t *testing.T, err error) *watchdog.VerdictError {
	t.Helper()
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	return v
}

func TestInvokableToolsUnderTheMiddleware(t *testing.T) {
	t.Run("progress that advances keeps a tool alive past its idle limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			begin := time.Now()
			out, err := chain(t, invokable{name: "works", steps: 20}).Invoke(context.Background(), call("works"))
			require.NoError(t, err)
			assert.Equal(t, "done", out[0].Content)
			assert.Equal(t, 2*time.Second, time.Since(begin))
		})
	})
	t.Run("the same progress again does not", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			begin := time.Now()
			_, err := chain(t, invokable{name: "repeats", steps: -1, repeat: true}).Invoke(context.Background(), call("repeats"))
			assert.Equal(t, "handler_idle", verdict(t, err).Rule)
			assert.Equal(t, 400*time.Millisecond, time.Since(begin))
		})
	})
	t.Run("the cap ends a tool that keeps progressing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, err := chain(t, invokable{name: "endless", steps: -1}).Invoke(context.Background(), call("endless"))
			assert.Equal(t, "handler_deadline", verdict(t, err).Rule)
		})
	})
}

// collect reads a streamed run to its end: the chunks and the last error.
func collect(sr *schema.StreamReader[[]*schema.Message]) (int, error) {
	n := 0
	for {
		msgs, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += len(msgs)
	}
}

func TestStreamableToolsUnderTheMiddleware(t *testing.T) {
	t.Run("a stream whose chunks keep coming runs past its idle limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sr, err := chain(t, streamable{name: "works", chunks: 10}).Stream(context.Background(), call("works"))
			require.NoError(t, err)
			n, err := collect(sr)
			require.NoError(t, err)
			assert.Positive(t, n)
		})
	})
	t.Run("a stream that stalls ends with the idle verdict", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			begin := time.Now()
			sr, err := chain(t, streamable{name: "stalls", chunks: 3, then: "stall"}).Stream(context.Background(), call("stalls"))
			require.NoError(t, err)
			_, err = collect(sr)
			assert.Equal(t, "handler_idle", verdict(t, err).Rule)
			assert.Equal(t, 300*time.Millisecond+300*time.Millisecond, time.Since(begin), "300 ms after the last chunk")
		})
	})
}

// A tool call in a watched session is recorded like any deadline.
func TestAToolCallInASessionIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		_, err = chain(t, invokable{name: "repeats", steps: -1, repeat: true}).Invoke(s.Context(), call("repeats"))
		verdict(t, err)
		require.NoError(t, s.Stop())
		require.NoError(t, w.Close(context.Background()))
		evs, err := store.Load(context.Background(), "agent")
		require.NoError(t, err)
		found := false
		for _, e := range evs {
			if e.Kind == watchdog.KindHandlerDeadline {
				found = true
				assert.Equal(t, "repeats", e.Handler)
				assert.Equal(t, uint64(1), e.ProgressValue)
			}
		}
		assert.True(t, found)
	})
}

// enhanced is an enhanced (multimodal) invokable tool that stalls.
type enhanced struct{}

func (enhanced) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "snapshot", Desc: "snapshot"}, nil
}

func (enhanced) InvokableRun(ctx context.Context, _ *schema.ToolArgument, _ ...tool.Option) (*schema.ToolResult, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// Enhanced tools are guarded too: a stalled one ends at its idle limit.
func TestAnEnhancedToolIsGuardedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		_, err := chain(t, enhanced{}).Invoke(context.Background(), call("snapshot"))
		assert.Equal(t, "handler_idle", verdict(t, err).Rule)
		assert.Equal(t, 300*time.Millisecond, time.Since(begin))
	})
}
