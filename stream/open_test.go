package stream_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
)

// opener is an open function that waits after for the server's headers
// (or for its context, as an SDK's NewStreaming does) before it returns a
// fake stream of script, started then; it keeps the context's cause.
type opener struct {
	after  time.Duration
	script []step
	f      *fakeStream // the stream returned, nil if none
	cause  error
}

func (o *opener) open(ctx context.Context) stream.Iterator[chunk] {
	select {
	case <-time.After(o.after):
		o.f = newFakeStream(o.script, false)
		return o.f
	case <-ctx.Done():
		o.cause = context.Cause(ctx)
		return &failedStream{err: ctx.Err()}
	}
}

// wait waits for the returned stream's goroutine.
func (o *opener) wait() {
	if o.f != nil {
		<-o.f.exited
	}
}

// failedStream is what an SDK's NewStreaming returns when its request
// failed: no chunk, the request's error.
type failedStream struct{ err error }

func (f *failedStream) Next() bool     { return false }
func (f *failedStream) Current() chunk { return chunk{} }
func (f *failedStream) Err() error     { return f.err }
func (f *failedStream) Close() error   { return nil }

// A server that never sends its headers is bounded by the first-chunk
// limit: open's context is cancelled with the stall's verdict, and the
// stream reports ErrStalled, FirstChunk after the guard's start.
func TestAServerThatNeverSendsItsHeadersStallsAtTheFirstChunkLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		o := &opener{after: 24 * time.Hour}
		s := stream.Guard(context.Background(), "llm", o.open,
			watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: time.Second, Cap: time.Hour}, isProgress)
		assert.Equal(t, 10*time.Second, time.Since(begin), "Guard returned when the first-chunk limit cut the open")
		assert.False(t, s.Next())
		require.ErrorIs(t, s.Err(), stream.ErrStalled)
		require.ErrorIs(t, o.cause, watchdog.ErrDeadlineExceeded, "open's context ended with the verdict")
		require.NoError(t, s.Close())
	})
}

// With no first-chunk or idle limit, the cap bounds the wait for the
// headers; the error is the cap's, not a stall.
func TestTheCapBoundsTheWaitForTheHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		o := &opener{after: 24 * time.Hour}
		s := stream.Guard(context.Background(), "llm", o.open, watchdog.CallLimits{Cap: time.Minute}, isProgress)
		assert.False(t, s.Next())
		assert.Equal(t, time.Minute, time.Since(begin))
		require.ErrorIs(t, s.Err(), watchdog.ErrDeadlineExceeded)
		require.NotErrorIs(t, s.Err(), stream.ErrStalled)
		require.NoError(t, s.Close())
	})
}

// The first-chunk limit counts from the guard's start, the wait for the
// headers included: headers after 40 s and a first chunk 10 s later fit a
// 60 s limit; headers after 40 s and a first chunk 30 s later do not.
func TestTheWaitForTheHeadersCountsTowardTheFirstChunkLimit(t *testing.T) {
	l := watchdog.CallLimits{FirstProgress: time.Minute, Idle: 5 * time.Second, Cap: time.Hour}
	synctest.Test(t, func(t *testing.T) {
		o := &opener{after: 40 * time.Second, script: []step{{10 * time.Second, chunk{"first"}}}}
		s := stream.Guard(context.Background(), "llm", o.open, l, isProgress)
		texts, _ := drain(s)
		assert.Equal(t, []string{"first"}, texts)
		require.NoError(t, s.Err())
		require.NoError(t, s.Close())
		o.wait()
	})
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		o := &opener{after: 40 * time.Second, script: []step{{30 * time.Second, chunk{"first"}}}}
		s := stream.Guard(context.Background(), "llm", o.open, l, isProgress)
		texts, at := drain(s)
		assert.Empty(t, texts)
		assert.Equal(t, time.Minute, at.Sub(begin))
		require.ErrorIs(t, s.Err(), stream.ErrStalled)
		require.NoError(t, s.Close())
		o.wait()
	})
}

// An open that ignores its context and returns a stream after the guard
// stopped gets that stream closed, and the stall reported.
func TestAStreamOpenedAfterTheGuardStoppedIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream(every(10, time.Second, chunk{"tok"}), false)
		open := func(context.Context) stream.Iterator[chunk] {
			time.Sleep(time.Minute) // deaf to its context
			return f
		}
		s := stream.Guard(context.Background(), "llm", open, watchdog.CallLimits{FirstProgress: 10 * time.Second, Cap: time.Hour}, isProgress)
		select {
		case <-f.closed:
		default:
			t.Fatal("the late stream was not closed")
		}
		assert.False(t, s.Next())
		require.ErrorIs(t, s.Err(), stream.ErrStalled)
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// Bad input is refused with an error naming it, and open is never called.
func TestANilOpenOrProduceIsRefused(t *testing.T) {
	s := stream.Guard[chunk](context.Background(), "llm", nil, watchdog.CallLimits{Cap: time.Minute}, nil)
	assert.False(t, s.Next())
	require.ErrorIs(t, s.Err(), watchdog.ErrInvalidArgument)
	assert.ErrorContains(t, s.Err(), "nil open function")
	assert.Equal(t, chunk{}, s.Current())
	require.NoError(t, s.Close())

	called := false
	s = stream.Guard(context.Background(), "llm", func(context.Context) stream.Iterator[chunk] { called = true; return nil }, watchdog.CallLimits{}, nil)
	require.ErrorIs(t, s.Err(), watchdog.ErrInvalidArgument)
	assert.False(t, called, "open is not called under limits the call refuses")
	require.NoError(t, s.Close())

	s = stream.Guard(context.Background(), "llm", func(context.Context) stream.Iterator[chunk] { return nil }, watchdog.CallLimits{Cap: time.Minute}, nil)
	assert.False(t, s.Next())
	require.ErrorIs(t, s.Err(), watchdog.ErrInvalidArgument)
	assert.ErrorContains(t, s.Err(), "nil stream")
	require.NoError(t, s.Close())

	for _, err := range stream.Seq[chunk](context.Background(), "llm", nil, watchdog.CallLimits{Cap: time.Minute}, nil) {
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		assert.ErrorContains(t, err, "nil produce function")
	}

	r, err := stream.Reader(context.Background(), "body", nil, watchdog.CallLimits{Cap: time.Minute}, nil)
	assert.Nil(t, r)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	r, err = stream.Reader(context.Background(), "body", func(context.Context) (io.ReadCloser, error) { return nil, nil }, watchdog.CallLimits{Cap: time.Minute}, nil)
	assert.Nil(t, r)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	r, err = stream.Reader(context.Background(), "body", openedBody(io.NopCloser(nil)), watchdog.CallLimits{}, nil)
	assert.Nil(t, r)
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
}

// Seq's producer opens its stream on the guard's context: a producer whose
// request waits for headers that never come stalls at the first-chunk
// limit.
func TestSeqBoundsAProducerWaitingForItsHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		produce := func(ctx context.Context) iter.Seq2[chunk, error] {
			return func(yield func(chunk, error) bool) {
				<-ctx.Done() // the request: no headers before its context ends
				yield(chunk{}, ctx.Err())
			}
		}
		var last error
		for _, err := range stream.Seq(context.Background(), "llm", produce, watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: time.Second, Cap: time.Hour}, isProgress) {
			last = err
		}
		assert.Equal(t, 10*time.Second, time.Since(begin))
		require.ErrorIs(t, last, stream.ErrStalled)
	})
}

// errOpen is open's error in the Reader tests.
var errOpen = errors.New("connection refused")

// Reader bounds the wait for the response's headers the same way: a body
// whose open never returns before its context ends makes Reader return
// the stall's error at the first-chunk limit, with no body.
func TestReaderBoundsTheWaitForTheHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		var cause error
		open := func(ctx context.Context) (io.ReadCloser, error) {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil, ctx.Err()
		}
		r, err := stream.Reader(context.Background(), "body", open, watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: time.Second, Cap: time.Hour}, nil)
		assert.Nil(t, r)
		require.ErrorIs(t, err, stream.ErrStalled)
		require.ErrorIs(t, cause, watchdog.ErrDeadlineExceeded)
		assert.Equal(t, 10*time.Second, time.Since(begin))
	})
	synctest.Test(t, func(t *testing.T) {
		r, err := stream.Reader(context.Background(), "body", func(context.Context) (io.ReadCloser, error) { return nil, errOpen }, watchdog.CallLimits{Cap: time.Hour}, nil)
		assert.Nil(t, r)
		require.ErrorIs(t, err, errOpen, "open's own error, when the guard did not stop it")
		require.NotErrorIs(t, err, stream.ErrStalled)
	})
}
