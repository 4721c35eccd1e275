package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
)

// sliceStream is a stream of chunks that then blocks until it is closed,
// as a stalled HTTP body does.
type sliceStream struct {
	chunks []chunk
	cur    chunk
	closed chan struct{}
}

func (s *sliceStream) Next() bool {
	if len(s.chunks) == 0 {
		<-s.closed // stalled: only Close unblocks it
		return false
	}
	s.cur, s.chunks = s.chunks[0], s.chunks[1:]
	return true
}
func (s *sliceStream) Current() chunk { return s.cur }
func (s *sliceStream) Err() error     { return nil }
func (s *sliceStream) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}

// Guard opens and wraps any stream with Next, Current, Err and Close
// (openai-go's and anthropic-sdk-go's among them), opened on the guard's
// context so that a server that holds back its headers is bounded too. A
// ping is not progress, so the stream that stalls after it is closed
// 100 ms after its last real chunk.
func ExampleGuard() {
	open := func(ctx context.Context) stream.Iterator[chunk] {
		// With an SDK: return client.Chat.Completions.NewStreaming(ctx, params)
		return &sliceStream{chunks: []chunk{{"Hel"}, {"lo"}, {""}}, closed: make(chan struct{})}
	}
	s := stream.Guard(context.Background(), "llm", open,
		watchdog.CallLimits{Idle: 100 * time.Millisecond, Cap: time.Minute},
		func(c chunk) bool { return c.text != "" }) // pings and empty deltas are not progress
	defer s.Close()
	var text string
	for s.Next() {
		text += s.Current().text
	}
	fmt.Println(text, errors.Is(s.Err(), stream.ErrStalled))
	// Output: Hello true
}

// Reader guards an HTTP body of server-sent events, opened on the guard's
// context. Its progress function takes the body's lines: only data lines
// with content count, so the ": ping" comments the server sends after its
// one event keep nothing alive, and the body is cut 200 ms after it.
func ExampleReader() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: hello\n\n")
		for {
			w.(http.Flusher).Flush()
			select {
			case <-time.After(20 * time.Millisecond):
				fmt.Fprint(w, ": ping\n\n")
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()
	open := func(ctx context.Context) (io.ReadCloser, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req) // waits for the headers, under the limits
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("status %s", resp.Status)
		}
		return resp.Body, nil
	}
	isData := func(line []byte) bool {
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		return ok && len(bytes.TrimSpace(data)) > 0
	}
	body, err := stream.Reader(context.Background(), "events", open,
		watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 200 * time.Millisecond, Cap: time.Minute}, isData)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			fmt.Println(data)
		}
	}
	fmt.Println(errors.Is(sc.Err(), stream.ErrStalled))
	// Output:
	// hello
	// true
}
