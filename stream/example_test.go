package stream_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		stream.Limits{Idle: 100 * time.Millisecond, Cap: time.Minute},
		func(c chunk) bool { return c.text != "" }) // pings and empty deltas are not progress
	defer s.Close()
	var text string
	for s.Next() {
		text += s.Current().text
	}
	fmt.Println(text, errors.Is(s.Err(), stream.ErrStalled))
	// Output: Hello true
}
