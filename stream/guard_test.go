package stream_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/stream"
)

var errClosed = errors.New("stream closed")

// chunk is what the fake model streams: text, or a ping with none.
type chunk struct{ text string }

func isProgress(c chunk) bool { return c.text != "" }

// fakeStream is an SDK-shaped stream fed by a script of (delay, chunk)
// steps; after the script it stalls (stall) or ends.
type fakeStream struct {
	ch        chan chunk
	cur       chunk
	closed    chan struct{}
	closeOnce sync.Once
	err       error
	exited    chan struct{} // closed when the script's goroutine returns
}

type step struct {
	after time.Duration
	c     chunk
}

func newFakeStream(script []step, stall bool) *fakeStream {
	f := &fakeStream{ch: make(chan chunk), closed: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(f.exited)
		for _, s := range script {
			select {
			case <-time.After(s.after):
			case <-f.closed:
				return
			}
			select {
			case f.ch <- s.c:
			case <-f.closed:
				return
			}
		}
		if !stall {
			close(f.ch)
		}
	}()
	return f
}

func (f *fakeStream) Next() bool {
	select {
	case c, ok := <-f.ch:
		f.cur = c
		return ok
	case <-f.closed:
		f.err = errClosed
		return false
	}
}
func (f *fakeStream) Current() chunk { return f.cur }
func (f *fakeStream) Err() error     { return f.err }
func (f *fakeStream) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

func every(n int, d time.Duration, c chunk) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = step{d, c}
	}
	return out
}

// drain consumes a guarded stream and returns the chunks' texts and the
// instant the stream ended.
func drain(s *stream.Guarded[chunk]) (texts []string, at time.Time) {
	for s.Next() {
		texts = append(texts, s.Current().text)
	}
	return texts, time.Now()
}

// A stream that stops sending in the middle is closed its idle limit after
// its last chunk, which unblocks the caller's Next, and reports an error
// matching ErrStalled and the call's verdict (rule handler_idle).
func TestAStreamThatStallsAfterSomeChunksIsClosedAndReportsErrStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		f := newFakeStream(every(3, time.Second, chunk{"tok"}), true)
		s := stream.Guard(context.Background(), "llm", opened(f), watchdog.CallLimits{FirstProgress: time.Minute, Idle: 5 * time.Second, Cap: time.Hour}, isProgress)
		texts, at := drain(s)
		assert.Len(t, texts, 3)
		assert.Equal(t, 3*time.Second+5*time.Second, at.Sub(begin), "5 s after the last chunk: the first-chunk limit is over")
		err := s.Err()
		require.ErrorIs(t, err, stream.ErrStalled)
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		var v *watchdog.VerdictError
		require.ErrorAs(t, err, &v)
		assert.Equal(t, "handler_idle", v.Rule)
		assert.Equal(t, "llm", v.Name)
		select {
		case <-f.closed:
		default:
			t.Fatal("the guard did not close the stream")
		}
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// Keep-alive pings and empty deltas are not progress: a stream that sends
// only those stalls at its first-chunk limit although bytes keep coming.
func TestPingsWithoutContentDoNotKeepAStreamAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		f := newFakeStream(every(100, 900*time.Millisecond, chunk{""}), false)
		s := stream.Guard(context.Background(), "llm", opened(f), watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 5 * time.Second, Cap: time.Hour}, isProgress)
		texts, at := drain(s)
		assert.Len(t, texts, 11, "the pings are passed on until the stall")
		assert.Equal(t, 10*time.Second, at.Sub(begin))
		require.ErrorIs(t, s.Err(), stream.ErrStalled)
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// A reasoning model that thinks for 50 s before its first token is not
// stopped under a 60 s first-chunk limit, though its idle limit is 5 s; the
// stream then ends normally with no error.
func TestAModelThatThinksBeforeItsFirstChunkHasTheFirstChunkLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		script := append([]step{{50 * time.Second, chunk{"first"}}}, every(10, time.Second, chunk{"tok"})...)
		f := newFakeStream(script, false)
		s := stream.Guard(context.Background(), "llm", opened(f), watchdog.CallLimits{FirstProgress: time.Minute, Idle: 5 * time.Second, Cap: time.Hour}, isProgress)
		texts, _ := drain(s)
		assert.Len(t, texts, 11)
		require.NoError(t, s.Err())
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// The cap ends a stream that keeps making progress; its error matches
// watchdog.ErrDeadlineExceeded, not ErrStalled.
func TestTheCapEndsAStreamThatKeepsProgressing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		f := newFakeStream(every(1000, time.Second, chunk{"tok"}), false)
		s := stream.Guard(context.Background(), "llm", opened(f), watchdog.CallLimits{Idle: 5 * time.Second, Cap: 30 * time.Second}, isProgress)
		_, at := drain(s)
		assert.Equal(t, 30*time.Second, at.Sub(begin))
		err := s.Err()
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		require.NotErrorIs(t, err, stream.ErrStalled)
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// Limits the call refuses end the stream at once with a clear error.
func TestAGuardWithoutACapRefusesToStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream(nil, false)
		s := stream.Guard(context.Background(), "llm", opened(f), watchdog.CallLimits{Idle: time.Second}, nil)
		assert.False(t, s.Next())
		require.ErrorIs(t, s.Err(), watchdog.ErrInvalidArgument)
		require.NoError(t, s.Close())
		<-f.exited
	})
}

// produce is a producer that honours its context: it yields the script's
// chunks, then stalls until its context ends.
func produce(script []step) func(ctx context.Context) iter.Seq2[chunk, error] {
	return func(ctx context.Context) iter.Seq2[chunk, error] {
		return func(yield func(chunk, error) bool) {
			for _, s := range script {
				select {
				case <-time.After(s.after):
				case <-ctx.Done():
					return
				}
				if !yield(s.c, nil) {
					return
				}
			}
			<-ctx.Done()
		}
	}
}

// Seq guards a producer: a stall cancels the producer's context, and the
// sequence ends with the stall's error.
func TestSeqStopsAStalledProducerAndYieldsErrStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		var texts []string
		var last error
		for c, err := range stream.Seq(context.Background(), "llm", produce(every(4, time.Second, chunk{"tok"})), watchdog.CallLimits{Idle: 2 * time.Second, Cap: time.Hour}, isProgress) {
			if err != nil {
				last = err
				continue
			}
			texts = append(texts, c.text)
		}
		assert.Len(t, texts, 4)
		assert.Equal(t, 6*time.Second, time.Since(begin))
		require.ErrorIs(t, last, stream.ErrStalled)
	})
}

// Reader guards a body: bytes are progress, and a stall closes the body,
// which unblocks the Read in progress with the stall's error.
func TestReaderClosesAStalledBodyAndReturnsErrStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			for range 3 {
				time.Sleep(time.Second)
				_, _ = pw.Write([]byte("data: {}\n\n"))
			}
			// then silent, never closed
		}()
		begin := time.Now()
		r, err := stream.Reader(context.Background(), "body", openedBody(pr), watchdog.CallLimits{Idle: 5 * time.Second, Cap: time.Hour}, nil)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		assert.Len(t, got, 30)
		require.ErrorIs(t, err, stream.ErrStalled)
		assert.Equal(t, 8*time.Second, time.Since(begin))
		require.NoError(t, r.Close())
		_ = pw.Close()
	})
}

// Inside a watched session the guard runs on the Watchdog's clock (here a
// mock), records the stall as a deadline event with the chunks counted as
// progress, and its progress chunks are tool-call evidence on the session
// (channel mcp_tool, and no other), while a chunk that is not progress (a
// ping) is not evidence at all.
func TestAGuardInASessionRecordsTheStallWithItsLastProgress(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(context.Background())
	// A liveness rule of the test's, reported stale, records a verdict
	// with the session's evidence whenever the test looks.
	sess, err := w.Start(context.Background(), "agent", mock.Now(), watchdog.Policy{LivenessRules: []string{"look"}, SettleChecks: 100, SettleInterval: time.Millisecond})
	require.NoError(t, err)
	begin := mock.Now()
	look := func() (tool *time.Time, others []string) {
		t.Helper()
		_, err := sess.ReportLiveness("look", true)
		require.NoError(t, err)
		require.NoError(t, w.Check(context.Background()))
		evs, err := store.Load(context.Background(), "agent")
		require.NoError(t, err)
		e := evs[len(evs)-1]
		require.Equal(t, watchdog.KindVerdict, e.Kind)
		require.Equal(t, mock.Now(), e.OccurredAt)
		for _, x := range e.EvidenceSummary {
			switch {
			case x.Channel == "mcp_tool":
				tool = x.LastAt
			case x.LastAt != nil:
				others = append(others, x.Channel)
			}
		}
		return tool, others
	}
	f := &pushStream{ch: make(chan chunk), closed: make(chan struct{})}
	s := stream.Guard(sess.Context(), "llm", opened(f), watchdog.CallLimits{Idle: 5 * time.Second, Cap: time.Hour}, isProgress)
	got, seen := make(chan int), make(chan struct{})
	go func() {
		n := 0
		for s.Next() { // the chunk's progress is recorded when Next returns
			n++
			seen <- struct{}{}
		}
		got <- n
	}()
	for i := range 2 {
		require.NoError(t, advanceMock(mock, time.Second, w))
		f.ch <- chunk{"tok"}
		testwait.For(t, seen, "the guard to return the chunk")
		tool, others := look()
		require.NotNil(t, tool, "a progress chunk is evidence on mcp_tool")
		assert.Equal(t, begin.Add(time.Duration(i+1)*time.Second), *tool, "evidence at the chunk's instant")
		assert.Empty(t, others, "and on no other channel")
	}
	require.NoError(t, advanceMock(mock, time.Second, w))
	f.ch <- chunk{""} // a ping: not progress
	testwait.For(t, seen, "the guard to return the ping")
	tool, others := look()
	assert.Equal(t, begin.Add(2*time.Second), *tool, "a chunk that is not progress is not evidence")
	assert.Empty(t, others)
	require.NoError(t, advanceMock(mock, 4*time.Second, w))
	assert.Equal(t, 3, testwait.For(t, got, "the reader to end"))
	require.ErrorIs(t, s.Err(), stream.ErrStalled)
	require.NoError(t, s.Close())
	require.NoError(t, w.Check(context.Background()))
	evs, err := store.Load(context.Background(), "agent")
	require.NoError(t, err)
	var d *watchdog.Event
	for i := range evs {
		if evs[i].Kind == watchdog.KindHandlerDeadline {
			d = &evs[i]
		}
	}
	require.NotNil(t, d)
	assert.Equal(t, "handler_idle", d.Rule)
	assert.Equal(t, "llm", d.Handler)
	assert.Equal(t, uint64(2), d.ProgressValue, "the ping is not counted")
	assert.Equal(t, begin.Add(2*time.Second), d.ProgressAt)
	assert.Equal(t, 5.0, d.MeasureSeconds)
	require.NoError(t, sess.Context().Err(), "a stalled stream is the call's verdict, not the session's")
}

// pushStream is a stream the test feeds chunk by chunk.
type pushStream struct {
	ch     chan chunk
	cur    chunk
	closed chan struct{}
	once   sync.Once
}

func (p *pushStream) Next() bool {
	select {
	case c := <-p.ch:
		p.cur = c
		return true
	case <-p.closed:
		return false
	}
}
func (p *pushStream) Current() chunk { return p.cur }
func (p *pushStream) Err() error     { return nil }
func (p *pushStream) Close() error   { p.once.Do(func() { close(p.closed) }); return nil }
