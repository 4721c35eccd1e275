package stream_test

import (
	"context"
	"io"
	"strings"
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

// body is an HTTP body the test writes to: every gap, the next of writes,
// then silent (left open) or, with end, closed. Its writer stops when the
// body is closed.
func body(gap time.Duration, writes []string, end bool) io.ReadCloser {
	pr, pw := io.Pipe()
	b := &pipeBody{PipeReader: pr, closed: make(chan struct{})}
	go func() {
		for _, s := range writes {
			select {
			case <-time.After(gap):
			case <-b.closed:
				return
			}
			if _, err := pw.Write([]byte(s)); err != nil {
				return
			}
		}
		if end {
			_ = pw.Close()
		}
	}()
	return b
}

type pipeBody struct {
	*io.PipeReader
	closed chan struct{}
	once   sync.Once
}

func (b *pipeBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.PipeReader.Close()
}

func repeat(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// A body that only pings (SSE comments, blank lines, empty data lines)
// stalls at its first-chunk limit under a progress function, though bytes
// keep coming; without one every byte counts and it is kept alive.
func TestReaderPingsOnlyStallAtTheFirstChunkLimitWithAProgressFunction(t *testing.T) {
	pings := repeat(100, ": ping\n\ndata:\n\ndata: \r\n\r\n")
	l := watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 5 * time.Second, Cap: time.Hour}
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		r, err := stream.Reader(context.Background(), "sse", openedBody(body(900*time.Millisecond, pings, false)), l, sseProgress)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.ErrorIs(t, err, stream.ErrStalled)
		assert.Equal(t, 10*time.Second, time.Since(begin))
		assert.NotEmpty(t, got, "the pings were read and passed on")
		require.NoError(t, r.Close())
	})
	synctest.Test(t, func(t *testing.T) {
		r, err := stream.Reader(context.Background(), "sse", openedBody(body(900*time.Millisecond, pings, true)), l, nil)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err, "with no progress function every byte is progress")
		assert.Len(t, got, 100*len(pings[0]))
		require.NoError(t, r.Close())
	})
}

// Content keeps the body alive past its idle limit, pings between it
// notwithstanding; content lines cut in two by the reads still count.
func TestReaderContentKeepsTheBodyAliveBetweenPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var writes []string
		for range 20 { // a line of content every 4 s, cut in two, pings in between
			writes = append(writes, "da", "ta: {\"delta\":\"tok\"}\n\n", ": ping\n\n", ": ping\n\n")
		}
		r, err := stream.Reader(context.Background(), "sse", openedBody(body(time.Second, writes, true)), watchdog.CallLimits{Idle: 5 * time.Second, Cap: time.Hour}, sseProgress)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err, "80 s of stream under a 5 s idle limit")
		assert.Equal(t, strings.Join(writes, ""), string(got))
		require.NoError(t, r.Close())
	})
}

// A line longer than MaxLine is data: it counts as progress once, without
// being passed to the progress function.
func TestReaderCountsALineLongerThanMaxLineAsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long := strings.Repeat("x", stream.MaxLine/4)
		writes := []string{"data: ", long, long, long, long, long, "\n", ": ping\n"}
		var passed []int
		progress := func(line []byte) bool { passed = append(passed, len(line)); return false }
		begin := time.Now()
		r, err := stream.Reader(context.Background(), "sse", openedBody(body(time.Second, writes, false)), watchdog.CallLimits{FirstProgress: 10 * time.Second, Idle: 4 * time.Second, Cap: time.Hour}, progress)
		require.NoError(t, err)
		_, err = io.ReadAll(r)
		require.ErrorIs(t, err, stream.ErrStalled)
		// the long line counted once, when its fifth part came (5 s), then
		// nothing did (the ping came at 8 s): the stall is 4 s later.
		assert.Equal(t, 9*time.Second, time.Since(begin))
		assert.Equal(t, []int{len(": ping")}, passed, "only the short line was passed")
		require.NoError(t, r.Close())
	})
}

// The cap ends a body that keeps making progress, with the cap's error.
func TestReaderCapEndsABodyThatKeepsProgressing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		r, err := stream.Reader(context.Background(), "sse", openedBody(body(time.Second, repeat(1000, "data: x\n\n"), true)), watchdog.CallLimits{Idle: 5 * time.Second, Cap: 30 * time.Second}, sseProgress)
		require.NoError(t, err)
		_, err = io.ReadAll(r)
		require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
		require.NotErrorIs(t, err, stream.ErrStalled)
		assert.Equal(t, 30*time.Second, time.Since(begin))
		require.NoError(t, r.Close())
	})
}

// In a session, a Reader with a progress function records the progress
// lines as the call's progress: the deadline event of its stall counts the
// data lines, not the pings nor the bytes.
func TestReaderInASessionRecordsProgressLinesNotBytes(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(context.Background())
	sess, err := w.Start(context.Background(), "agent", mock.Now(), watchdog.Policy{})
	require.NoError(t, err)
	pr, pw := io.Pipe()
	r, err := stream.Reader(sess.Context(), "sse", openedBody(pr), watchdog.CallLimits{Idle: 5 * time.Second, Cap: time.Hour}, sseProgress)
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := io.Copy(io.Discard, r)
		done <- err
	}()
	for _, s := range []string{"data: a\n\ndata: b\n\n", ": ping\n\n", "data:\n\n"} {
		require.NoError(t, advanceMock(mock, time.Second, w))
		_, err := pw.Write([]byte(s)) // returns once the guard has read it
		require.NoError(t, err)
	}
	require.NoError(t, advanceMock(mock, 5*time.Second, w))
	require.ErrorIs(t, testwait.For(t, done, "the copy to end"), stream.ErrStalled)
	require.NoError(t, r.Close())
	require.NoError(t, w.Check(context.Background()))
	evs, err := store.Load(context.Background(), "agent")
	require.NoError(t, err)
	var found bool
	for _, e := range evs {
		if e.Kind == watchdog.KindHandlerDeadline {
			found = true
			assert.Equal(t, "handler_idle", e.Rule)
			assert.Equal(t, uint64(2), e.ProgressValue, "two data lines with content")
		}
	}
	assert.True(t, found)
}
