package lines_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testutil"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/lines"
)

// policy: stdout is the baseline; stderr is an evidence channel that defers
// the idle rule for EvidenceTTL after its last evidence.
var policy = watchdog.Policy{
	WallClock: time.Hour, IdleWindow: 5 * time.Second, EvidenceTTL: 5 * time.Second,
	SettleChecks: 1, Channels: []string{"stderr"},
}

type worker struct {
	mock *clock.Mock
	w    *watchdog.Watchdog
	s    *watchdog.Session
	ch   watchdog.Channel
}

func start(t *testing.T) (*worker, *watchdog.MemoryStore) {
	mock := testutil.NewMock()
	store := watchdog.NewMemoryStore()
	w := testutil.NewWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "worker", testutil.T0, policy)
	require.NoError(t, err)
	ch, err := s.Channel("stderr")
	require.NoError(t, err)
	return &worker{mock, w, s, ch}, store
}

// every writes line(i) to out every period until the session ends or for
// d, and returns how long it ran.
func (k *worker) every(t *testing.T, out io.Writer, period, d time.Duration, line func(i int) string) time.Duration {
	for i := 0; time.Duration(i)*period < d && k.s.Context().Err() == nil; i++ {
		testutil.Advance(t, k.mock, period, k.w)
		if k.s.Context().Err() == nil {
			_, err := io.WriteString(out, line(i))
			require.NoError(t, err)
		}
	}
	return k.mock.Now().Sub(testutil.T0)
}

// A wedged worker whose only output is the same heartbeat line on stderr
// every 500 ms is stopped by the idle rule once the first heartbeat's
// evidence has expired: the repeats are not evidence.
func TestARepeatedHeartbeatLineIsNotEvidence(t *testing.T) {
	k, store := start(t)
	out := lines.Writer(k.s, k.ch, nil)
	k.every(t, out, 500*time.Millisecond, time.Minute, func(int) string { return "worker: still alive\n" })
	require.ErrorIs(t, context.Cause(k.s.Context()), watchdog.ErrIdleExceeded)
	evs := testutil.Load(t, store, "worker")
	cancel := evs[len(evs)-1]
	assert.Equal(t, testutil.T0.Add(500*time.Millisecond+5*time.Second+time.Nanosecond), cancel.OccurredAt,
		"the first heartbeat's evidence expired")
	assert.Equal(t, uint64(1), counter(cancel, "stderr"), "one line was evidence")
}

// The same worker wired with Session.Writer stays alive: every write is
// evidence. This is what lines.Writer is for.
func TestWithSessionWriterARepeatedHeartbeatKeepsAWedgedWorkerAlive(t *testing.T) {
	k, _ := start(t)
	out := k.s.Writer(k.ch, nil)
	k.every(t, out, 500*time.Millisecond, time.Minute, func(int) string { return "worker: still alive\n" })
	require.NoError(t, k.s.Context().Err())
}

// A worker whose lines change (its steps) is working: each new line is
// evidence, and the idle rule waits.
func TestDistinctLinesAreEvidence(t *testing.T) {
	k, _ := start(t)
	out := lines.Writer(k.s, k.ch, nil)
	k.every(t, out, 2*time.Second, time.Minute, func(i int) string { return fmt.Sprintf("step %d\n", i) })
	require.NoError(t, k.s.Context().Err())
}

// A spinner cycling through its frames, each ended by a carriage return,
// is evidence for its first frames only.
func TestASpinnerIsNotEvidence(t *testing.T) {
	k, _ := start(t)
	out := lines.Writer(k.s, k.ch, nil)
	frames := []string{"|\r", "/\r", "-\r", "\\\r"}
	ran := k.every(t, out, 250*time.Millisecond, time.Minute, func(i int) string { return frames[i%4] })
	require.ErrorIs(t, context.Cause(k.s.Context()), watchdog.ErrIdleExceeded)
	assert.Equal(t, time.Second+5*time.Second+250*time.Millisecond, ran, "stopped at the first look after the last new frame's evidence expired")
}

// What counts, read back from the cancel event's evidence summary (one
// record per write in which a new line ends): a line counts when it ends,
// split across writes or not; an empty line does not; a repeat of one of
// the last distinct lines does not, an older one does again; a long line
// counts once per 4 KiB.
func TestWhatCountsAsALine(t *testing.T) {
	cases := map[string]struct {
		writes []string
		opts   []lines.Option
		want   uint64
	}{
		"partial line":            {[]string{"abc"}, nil, 0},
		"line across writes":      {[]string{"ab", "c", "\n"}, nil, 1},
		"empty lines":             {[]string{"\n", "\n", "\r\n"}, nil, 0},
		"crlf":                    {[]string{"a\r\n", "b\r\n"}, nil, 2},
		"one record per write":    {[]string{"a\nb\nc\n"}, nil, 1},
		"repeats":                 {[]string{"a\n", "a\n", "a\nb\n", "a\nb\n"}, nil, 2},
		"older than Recent(2)":    {[]string{"a\n", "b\n", "c\n", "a\n"}, []lines.Option{lines.Recent(2)}, 4},
		"within Recent(3)":        {[]string{"a\n", "b\n", "c\n", "a\n"}, []lines.Option{lines.Recent(3)}, 3},
		"Recent(0) means 1":       {[]string{"a\n", "a\n", "b\n", "a\n"}, []lines.Option{lines.Recent(0)}, 3},
		"long line":               {[]string{strings.Repeat("x", 4096), strings.Repeat("x", 4096), "yz\n"}, nil, 2},
		"long line across writes": {[]string{strings.Repeat("x", 4000), strings.Repeat("y", 200), "\n"}, nil, 2},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			k, store := start(t)
			out := lines.Writer(k.s, k.ch, nil, c.opts...)
			for _, w := range c.writes {
				n, err := io.WriteString(out, w)
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			assert.Equal(t, c.want, k.finish(t, store))
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write(p []byte) (int, error) { return 1, errors.New("disk full") }

// Write passes the bytes on and returns what the wrapped writer returns;
// the evidence is recorded whatever it returns.
func TestWriteReturnsTheWrappedWritersResult(t *testing.T) {
	k, store := start(t)
	var b strings.Builder
	n, err := lines.Writer(k.s, k.ch, &b).Write([]byte("hello\nwor"))
	require.NoError(t, err)
	assert.Equal(t, 9, n)
	assert.Equal(t, "hello\nwor", b.String())
	n, err = lines.Writer(k.s, k.ch, failingWriter{}).Write([]byte("other\n"))
	assert.Equal(t, 1, n)
	require.EqualError(t, err, "disk full")
	assert.Equal(t, uint64(2), k.finish(t, store))
}

// A Writer shared by goroutines (a command's stdout and stderr) is safe:
// the race detector watches, and each distinct line counts once.
func TestAWriterIsSafeForConcurrentUse(t *testing.T) {
	k, store := start(t)
	out := lines.Writer(k.s, k.ch, io.Discard, lines.Recent(64))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				_, _ = fmt.Fprintf(out, "line %d\n", i%8+8*(g%2))
			}
		})
	}
	testwait.Group(t, &wg, "the goroutines writing lines")
	assert.Equal(t, uint64(16), k.finish(t, store))
}

// finish lets the session end (the idle rule) and returns the stderr
// channel's counter in its cancel event's evidence summary.
func (k *worker) finish(t *testing.T, store *watchdog.MemoryStore) uint64 {
	testutil.Advance(t, k.mock, time.Hour, k.w)
	evs := testutil.Load(t, store, "worker")
	cancel := evs[len(evs)-1]
	require.Equal(t, watchdog.KindCancel, cancel.Kind)
	return counter(cancel, "stderr")
}

func counter(e watchdog.Event, channel string) uint64 {
	for _, en := range e.EvidenceSummary {
		if en.Channel == channel {
			return en.Counter
		}
	}
	return 0
}
