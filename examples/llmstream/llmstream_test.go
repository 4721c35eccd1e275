package llmstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/examples/llmstream"
	"github.com/sessionwatchdog/watchdog/stream"
)

// call streams from the local server through one SDK and the guard.
type call func(ctx context.Context, url string, l watchdog.CallLimits) (string, error)

var sdks = map[string]call{
	"openai-go": func(ctx context.Context, url string, l watchdog.CallLimits) (string, error) {
		return llmstream.OpenAIChat(ctx, openaiClient(url), "hello", l)
	},
	"anthropic-sdk-go": func(ctx context.Context, url string, l watchdog.CallLimits) (string, error) {
		return llmstream.AnthropicMessage(ctx, anthropicClient(url), "hello", l)
	},
}

// These run on the real clock against a real local server; they assert
// what happened, never how long it took. The limits leave wide margins
// (chunks 10 ms apart under a 500 ms idle limit).
func TestTheGuardAroundRealSDKStreams(t *testing.T) {
	for name, sdk := range sdks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("a stream that stalls after three chunks is closed and reports ErrStalled", func(t *testing.T) {
				srv := server(scenario{chunks: []string{"Hel", "lo ", "wor"}, gap: 10 * time.Millisecond, then: "stall"})
				defer srv.Close()
				text, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.ErrorIs(t, err, stream.ErrStalled)
				assert.Equal(t, "Hello wor", text, "what came before the stall")
			})
			t.Run("pings without content keep nothing alive", func(t *testing.T) {
				srv := server(scenario{then: "ping"})
				defer srv.Close()
				text, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.ErrorIs(t, err, stream.ErrStalled)
				assert.Empty(t, text)
			})
			t.Run("a model that thinks before its first chunk gets the first-chunk limit", func(t *testing.T) {
				srv := server(scenario{think: 1500 * time.Millisecond, chunks: []string{"Hel", "lo"}, gap: 10 * time.Millisecond, then: "end"})
				defer srv.Close()
				text, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.NoError(t, err)
				assert.Equal(t, "Hello", text)
				// The same stream under the idle limit alone is cut off.
				_, err = sdk(context.Background(), srv.URL, watchdog.CallLimits{Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.ErrorIs(t, err, stream.ErrStalled)
			})
			t.Run("a server that never sends its headers stalls at the first-chunk limit", func(t *testing.T) {
				srv := server(scenario{headers: -1})
				defer srv.Close()
				text, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{FirstProgress: 300 * time.Millisecond, Idle: 100 * time.Millisecond, Cap: time.Minute})
				require.ErrorIs(t, err, stream.ErrStalled)
				assert.Empty(t, text)
				// With neither a first-chunk nor an idle limit, the cap
				// bounds the wait.
				_, err = sdk(context.Background(), srv.URL, watchdog.CallLimits{Cap: 300 * time.Millisecond})
				require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
				require.NotErrorIs(t, err, stream.ErrStalled)
			})
			t.Run("headers sent after the first-chunk limit are too late", func(t *testing.T) {
				srv := server(scenario{headers: 1500 * time.Millisecond, chunks: []string{"Hel", "lo"}, gap: 10 * time.Millisecond, then: "end"})
				defer srv.Close()
				_, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{FirstProgress: 500 * time.Millisecond, Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.ErrorIs(t, err, stream.ErrStalled)
				// The same server under a first-chunk limit that leaves
				// room for the wait streams its answer.
				text, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 500 * time.Millisecond, Cap: time.Minute})
				require.NoError(t, err)
				assert.Equal(t, "Hello", text)
			})
			t.Run("the cap ends a stream that keeps going", func(t *testing.T) {
				chunks := make([]string, 1000)
				for i := range chunks {
					chunks[i] = "x"
				}
				srv := server(scenario{chunks: chunks, gap: 10 * time.Millisecond, then: "end"})
				defer srv.Close()
				_, err := sdk(context.Background(), srv.URL, watchdog.CallLimits{Idle: 5 * time.Second, Cap: 300 * time.Millisecond})
				require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
				require.NotErrorIs(t, err, stream.ErrStalled)
			})
		})
	}
}

// Inside a watched session, the stall is recorded like any other verdict:
// a deadline event naming the call, the idle rule and the chunks counted
// as progress; the session itself goes on.
func TestAStalledSDKStreamIsRecordedOnTheSession(t *testing.T) {
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithStore(store))
	defer w.Close(context.Background())
	s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{})
	require.NoError(t, err)
	srv := server(scenario{chunks: []string{"a", "b", "c"}, gap: 10 * time.Millisecond, then: "stall"})
	defer srv.Close()
	_, err = llmstream.OpenAIChat(s.Context(), openaiClient(srv.URL), "hello", watchdog.CallLimits{Idle: 500 * time.Millisecond, Cap: time.Minute})
	require.ErrorIs(t, err, stream.ErrStalled)
	require.NoError(t, s.Context().Err())
	require.NoError(t, s.Stop())
	require.NoError(t, w.Close(context.Background()))
	evs, err := store.Load(context.Background(), "agent")
	require.NoError(t, err)
	var found bool
	for _, e := range evs {
		if e.Kind == watchdog.KindHandlerDeadline {
			found = true
			assert.Equal(t, "openai.chat", e.Handler)
			assert.Equal(t, "handler_idle", e.Rule)
			assert.Equal(t, uint64(3), e.ProgressValue, "three chunks with content")
		}
	}
	assert.True(t, found, "the stall is recorded")
}

// OpenAIChat guards an openai-go stream: a server that stops sending after
// three chunks is cut off 500 ms later, with what came before it.
func ExampleOpenAIChat() {
	srv := server(scenario{chunks: []string{"Hel", "lo ", "wor"}, gap: 10 * time.Millisecond, then: "stall"})
	defer srv.Close()
	text, err := llmstream.OpenAIChat(context.Background(), openaiClient(srv.URL), "hello",
		watchdog.CallLimits{FirstProgress: time.Minute, Idle: 500 * time.Millisecond, Cap: 10 * time.Minute})
	fmt.Printf("%q stalled=%v\n", text, errors.Is(err, stream.ErrStalled))
	// Output: "Hello wor" stalled=true
}

// AnthropicMessage guards an anthropic-sdk-go stream: pings are not
// progress, so a server that only pings is cut off at the first-chunk
// limit.
func ExampleAnthropicMessage() {
	srv := server(scenario{then: "ping"})
	defer srv.Close()
	text, err := llmstream.AnthropicMessage(context.Background(), anthropicClient(srv.URL), "hello",
		watchdog.CallLimits{FirstProgress: 500 * time.Millisecond, Idle: 500 * time.Millisecond, Cap: 10 * time.Minute})
	fmt.Printf("%q stalled=%v\n", text, errors.Is(err, stream.ErrStalled))
	// Output: "" stalled=true
}
