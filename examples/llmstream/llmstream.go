package llmstream

import (
	"context"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"

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
// and returns the text received. On a stall its error matches
// stream.ErrStalled, and the text is what came before it.
func OpenAIChat(ctx context.Context, client openai.Client, prompt string, l stream.Limits) (string, error) {
	s := stream.Guard(ctx, "openai.chat", stream.Iterator[openai.ChatCompletionChunk](
		client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    openai.ChatModelGPT4o,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})), l, OpenAIProgress)
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
// and returns the text received. On a stall its error matches
// stream.ErrStalled, and the text is what came before it.
func AnthropicMessage(ctx context.Context, client anthropic.Client, prompt string, l stream.Limits) (string, error) {
	s := stream.Guard(ctx, "anthropic.messages", stream.Iterator[anthropic.MessageStreamEventUnion](
		client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
			Model:     anthropic.ModelClaudeSonnet4_5,
			MaxTokens: 1024,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		})), l, AnthropicProgress)
	defer s.Close()
	var text strings.Builder
	for s.Next() {
		if e := s.Current(); e.Type == "content_block_delta" {
			text.WriteString(e.Delta.Text)
		}
	}
	return text.String(), s.Err()
}
