package lines_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/lines"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// A wedged worker prints the same line on stderr every 500 ms. Through
// lines.Writer only the first one is evidence, so the idle rule stops the
// worker once that evidence is EvidenceTTL old (through s.Writer, every
// line would keep it alive until its wall clock).
func ExampleWriter() {
	ctx := context.Background()
	mock := clock.NewMock()
	start := mock.Now()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	s, err := w.Start(ctx, "worker", start, watchdog.Policy{
		WallClock: time.Hour, IdleWindow: 5 * time.Second, EvidenceTTL: 5 * time.Second,
		SettleChecks: 1, Channels: []string{"stderr"},
	})
	if err != nil {
		panic(err)
	}
	stderr, _ := s.Channel("stderr")
	out := lines.Writer(s, stderr, nil) // nil: discard the bytes once counted
	for s.Context().Err() == nil {
		_ = watchdogtest.Advance(ctx, mock, 500*time.Millisecond, w)
		fmt.Fprintln(out, "worker: still alive")
	}
	var v *watchdog.VerdictError
	if errors.As(context.Cause(s.Context()), &v) {
		fmt.Println(v.Rule, "after", v.FiredAt.Sub(start).Round(time.Millisecond))
	}
	// Output: idle after 5.5s
}
