package einowatchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/einowatchdog"
)

// inSession runs the graph's stream for the tool call named tool inside a
// watched session, reads it to its end, and returns the chunks read, the
// stream's last error and the session's deadline records.
func inSession(t *testing.T, b einowatchdog.Budgets, tl tool.BaseTool, name string) (int, error, []watchdog.Event) {
	t.Helper()
	ctx := context.Background()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithStore(store))
	s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{})
	require.NoError(t, err)
	sr, err := chainWith(t, b, tl).Stream(s.Context(), call(name))
	require.NoError(t, err)
	n, streamErr := collect(sr)
	require.NoError(t, s.Stop())
	require.NoError(t, w.Close(ctx))
	evs, err := store.Load(ctx, "agent")
	require.NoError(t, err)
	var over []watchdog.Event
	for _, e := range evs {
		if e.Kind == watchdog.KindHandlerDeadline {
			over = append(over, e)
		}
	}
	return n, streamErr, over
}

// A streamable tool whose chunks keep coming past its cap is ended at the
// cap, and the record says so: the cap's rule, with every chunk counted as
// progress.
func TestAStreamThatKeepsSendingPastItsCapEndsAtTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := einowatchdog.Budgets{Default: watchdog.CallLimits{Cap: 1050 * time.Millisecond, Idle: 300 * time.Millisecond}}
		begin := time.Now()
		n, err, over := inSession(t, b, streamable{name: "endless", then: "chunks"}, "endless")
		v := verdict(t, err)
		assert.Equal(t, "handler_deadline", v.Rule)
		assert.Equal(t, 1050*time.Millisecond, v.Budget)
		assert.Equal(t, 10, n, "the chunks sent before the cap (100 ms apart) reached the reader")
		require.Len(t, over, 1)
		assert.Equal(t, "endless", over[0].Handler)
		assert.Equal(t, "handler_deadline", over[0].Rule)
		assert.Equal(t, "handler_deadline_exceeded", over[0].Reason)
		assert.Equal(t, 1.05, over[0].LimitSeconds)
		assert.Equal(t, uint64(10), over[0].ProgressValue)
		assert.True(t, begin.Add(1050*time.Millisecond).Equal(over[0].OccurredAt))
	})
}

// Without a progress function every chunk is progress: a tool that sends
// only keep-alives after its content keeps itself alive until its cap.
func TestKeepAliveChunksKeepAStreamAliveWithoutAProgressFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		_, err, over := inSession(t, budgets, streamable{name: "pings", chunks: 2, then: "keep-alives"}, "pings")
		assert.Equal(t, "handler_deadline", verdict(t, err).Rule)
		assert.Equal(t, 5*time.Second, time.Since(begin), "the default cap")
		require.Len(t, over, 1)
		assert.Equal(t, "handler_deadline", over[0].Rule)
	})
}

// rejectKeepAlives is a budget whose progress function rejects empty
// chunks, with an idle limit (250 ms) that does not fall on a chunk's
// instant; asked records the tool names it is called with.
func rejectKeepAlives(asked *[]string) einowatchdog.Budgets {
	return einowatchdog.Budgets{
		Default: watchdog.CallLimits{Cap: 5 * time.Second, Idle: 250 * time.Millisecond},
		Progress: func(tool, chunk string) bool {
			*asked = append(*asked, tool)
			return chunk != ""
		},
	}
}

// With a progress function that rejects keep-alives, a tool that sends only
// keep-alives after its content is ended at its idle limit after its last
// content chunk, and the keep-alives still reach the reader.
func TestAProgressFunctionStopsKeepAlivesFromKeepingAStreamAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked []string
		begin := time.Now()
		sr, err := chainWith(t, rejectKeepAlives(&asked), streamable{name: "pings", chunks: 2, then: "keep-alives"}).Stream(context.Background(), call("pings"))
		require.NoError(t, err)
		n, err := collect(sr)
		assert.Equal(t, "handler_idle", verdict(t, err).Rule)
		assert.Equal(t, 200*time.Millisecond+250*time.Millisecond, time.Since(begin), "250 ms after the second content chunk")
		assert.Equal(t, 4, n, "2 content chunks and the keep-alives at 300 and 400 ms")
		require.NotEmpty(t, asked)
		assert.Equal(t, "pings", asked[0], "the function is told the tool's name")
	})
}

// In a session, the deadline record of a stream ended that way counts only
// its progress chunks as progress.
func TestTheRecordCountsOnlyProgressChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked []string
		_, err, over := inSession(t, rejectKeepAlives(&asked), streamable{name: "pings", chunks: 2, then: "keep-alives"}, "pings")
		assert.Equal(t, "handler_idle", verdict(t, err).Rule)
		require.Len(t, over, 1)
		assert.Equal(t, "pings", over[0].Handler)
		assert.Equal(t, "handler_idle", over[0].Rule)
		assert.Equal(t, uint64(2), over[0].ProgressValue, "the 2 content chunks, not the keep-alives")
	})
}

// enhancedStream is an enhanced (multimodal) streamable tool that sends one
// result with a text part, then empty results 100 ms apart until its
// context ends.
type enhancedStream struct{}

func (enhancedStream) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "screen", Desc: "screen"}, nil
}

func (enhancedStream) StreamableRun(ctx context.Context, _ *schema.ToolArgument, _ ...tool.Option) (*schema.StreamReader[*schema.ToolResult], error) {
	r, w := schema.Pipe[*schema.ToolResult](0)
	go func() {
		defer w.Close()
		for i := 0; ; i++ {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			res := &schema.ToolResult{}
			if i == 0 {
				res.Parts = []schema.ToolOutputPart{{Type: schema.ToolPartTypeText, Text: "frame"}}
			}
			if w.Send(res, nil) {
				return
			}
		}
	}()
	return r, nil
}

// Enhanced streamable tools have their own progress function: empty
// results rejected by it end the stream at its idle limit.
func TestAnEnhancedStreamHasItsOwnProgressFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := budgets
		b.EnhancedProgress = func(_ string, r *schema.ToolResult) bool { return len(r.Parts) > 0 }
		begin := time.Now()
		sr, err := chainWith(t, b, enhancedStream{}).Stream(context.Background(), call("screen"))
		require.NoError(t, err)
		_, err = collect(sr)
		assert.Equal(t, "handler_idle", verdict(t, err).Rule)
		assert.Equal(t, 100*time.Millisecond+300*time.Millisecond, time.Since(begin), "300 ms after the only result with content")
	})
}

// A progress function that panics ends the stream with an error naming
// the tool, rather than the program.
func TestAProgressFunctionThatPanicsEndsTheStreamWithAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := budgets
		b.Progress = func(string, string) bool { panic("boom") }
		sr, err := chainWith(t, b, streamable{name: "works", chunks: 3}).Stream(context.Background(), call("works"))
		require.NoError(t, err)
		n, err := collect(sr)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `the progress function of tool "works" panicked: boom`)
		assert.Zero(t, n)
	})
}

// With the Watchdog's call records on, a streamable tool call's end is
// recorded when its stream ends: how long it streamed and its chunks.
func TestAStreamsEndIsRecordedWhenItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store), watchdog.WithCallRecords(10))
		s, err := w.Start(ctx, "agent", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		sr, err := chain(t, streamable{name: "works", chunks: 10}).Stream(s.Context(), call("works"))
		require.NoError(t, err)
		_, err = collect(sr)
		require.NoError(t, err)
		require.NoError(t, s.Stop())
		require.NoError(t, w.Close(ctx))
		evs, err := store.Load(ctx, "agent")
		require.NoError(t, err)
		var done []watchdog.Event
		for _, e := range evs {
			if e.Kind == watchdog.KindCallCompleted {
				done = append(done, e)
			}
		}
		require.Len(t, done, 1)
		assert.Equal(t, "works", done[0].Handler)
		assert.Equal(t, "ok", done[0].Reason)
		assert.Equal(t, 1.0, done[0].MeasureSeconds, "10 chunks 100 ms apart")
		assert.Equal(t, uint64(10), done[0].ProgressValue)
	})
}
