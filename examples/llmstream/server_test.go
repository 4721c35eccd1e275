package llmstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// scenario is how the local server streams: it holds back its response
// headers for headers (never, if negative), thinks, then sends chunks (with
// a gap between them), and then ends, stalls (holds the connection open,
// sending nothing), or sends keep-alive pings without content.
type scenario struct {
	headers time.Duration
	think   time.Duration
	chunks  []string
	gap     time.Duration
	then    string // "end", "stall" or "ping"
}

// server is a local server that speaks the streaming APIs of OpenAI
// (/chat/completions) and Anthropic (/v1/messages) with server-sent events.
func server(sc scenario) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		anth := strings.HasSuffix(r.URL.Path, "/messages")
		// Read the request first: only then does the server watch the
		// connection, and end r's context when the client goes away.
		_, _ = io.Copy(io.Discard, r.Body)
		wait := func(d time.Duration) bool {
			if d < 0 {
				<-r.Context().Done()
				return false
			}
			select {
			case <-time.After(d):
				return true
			case <-r.Context().Done():
				return false
			}
		}
		if !wait(sc.headers) { // a proxy or server holding back the headers
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flush := func(event, data string) bool {
			if event != "" {
				fmt.Fprintf(w, "event: %s\n", event)
			}
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
			return r.Context().Err() == nil
		}
		if anth {
			flush("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`)
			flush("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		} else {
			flush("", `{"id":"c1","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
		}
		if !wait(sc.think) {
			return
		}
		for i, c := range sc.chunks {
			if i > 0 && !wait(sc.gap) {
				return
			}
			if anth {
				flush("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, c))
			} else {
				flush("", fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":%q}}]}`, c))
			}
		}
		switch sc.then {
		case "stall":
			<-r.Context().Done()
		case "ping":
			for wait(50 * time.Millisecond) {
				if anth {
					flush("ping", `{"type":"ping"}`)
				} else { // an empty delta: bytes, but no content
					flush("", `{"id":"c1","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":""}}]}`)
				}
			}
		default:
			if anth {
				flush("content_block_stop", `{"type":"content_block_stop","index":0}`)
				flush("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`)
				flush("message_stop", `{"type":"message_stop"}`)
			} else {
				flush("", "[DONE]")
			}
		}
	}))
}

func openaiClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

func anthropicClient(url string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("test"), aoption.WithMaxRetries(0))
}
