package llmstream

import (
	"context"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
)

// OpenAIProgress says whether a chat completion chunk is progress: it
// carries content, a refusal or a tool call. Empty deltas (and the
// role-only first chunk) are not.
func OpenAIProgress(c openai.ChatCompletionChunk) bool {
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || ch.Delta.Refusal != "" || len(ch.Delta.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// OpenAIChat streams a chat completion of prompt under the guard's limits
// and returns the text received. The wait for the response's headers
// counts toward the first-chunk limit and the cap. On a stall its error
// matches stream.ErrStalled, and the text is what came before it.
func OpenAIChat(ctx context.Context, client openai.Client, prompt string, l watchdog.CallLimits) (string, error) {
	params := openai.ChatCompletionNewParams{
		Model:    openai.ChatModelGPT4o,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
	// The guard opens the stream on its own context: NewStreaming waits for
	// the response's headers, and that wait counts toward l.FirstProgress and
	// l.Cap too.
	s := stream.Guard(ctx, "openai.chat", func(ctx context.Context) stream.Iterator[openai.ChatCompletionChunk] {
		return client.Chat.Completions.NewStreaming(ctx, params)
	}, l, OpenAIProgress)
	defer s.Close()
	var text strings.Builder
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	return text.String(), s.Err()
}

// AnthropicProgress says whether a message stream event is progress: a
// content block delta with text, thinking or tool input. Pings and the
// message's bookkeeping events are not.
func AnthropicProgress(e anthropic.MessageStreamEventUnion) bool {
	return e.Type == "content_block_delta" && (e.Delta.Text != "" || e.Delta.Thinking != "" || e.Delta.PartialJSON != "")
}

// AnthropicMessage streams a message for prompt under the guard's limits
// and returns the text received. The wait for the response's headers
// counts toward the first-chunk limit and the cap. On a stall its error
// matches stream.ErrStalled, and the text is what came before it.
func AnthropicMessage(ctx context.Context, client anthropic.Client, prompt string, l watchdog.CallLimits) (string, error) {
	params := anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeSonnet4_5,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
	s := stream.Guard(ctx, "anthropic.messages", func(ctx context.Context) stream.Iterator[anthropic.MessageStreamEventUnion] {
		return client.Messages.NewStreaming(ctx, params) // opened under the guard's limits
	}, l, AnthropicProgress)
	defer s.Close()
	var text strings.Builder
	for s.Next() {
		if e := s.Current(); e.Type == "content_block_delta" {
			text.WriteString(e.Delta.Text)
		}
	}
	return text.String(), s.Err()
}
