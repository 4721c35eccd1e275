package whatif_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
	"github.com/sessionwatchdog/watchdog/whatif"
)

// An agent talks, thinks silently for 40 s, talks again and completes. Its
// log, recorded with checkpoints every second, answers what a 10 s idle
// window would have done: stopped it earlier (after the default settle
// window of 3 stale checks 10 s apart), a likely false stop, since the
// agent went on to talk and complete.
func ExampleRun() {
	ctx := context.Background()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store), watchdog.WithCheckpoints(time.Second))
	s, _ := w.Start(ctx, "agent", mock.Now(), watchdog.Policy{WallClock: time.Hour, IdleWindow: time.Minute})
	s.Touch(watchdog.ChannelStdout)
	_ = watchdogtest.Advance(ctx, mock, 40*time.Second, w) // thinking, silently
	s.Touch(watchdog.ChannelStdout)
	_ = watchdogtest.Advance(ctx, mock, 2*time.Second, w)
	_ = s.Stop()
	_ = w.Close(ctx)
	events, _ := store.Load(ctx, "agent")

	r, err := whatif.Run(events, watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second}, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	win := r.Windows[0]
	fmt.Println(win.Outcome, "by", win.Candidate[0].Rule, "at", win.Candidate[0].At.Sub(win.OpenedAt).Round(time.Millisecond))
	fmt.Println("likely false stop:", win.FalseStop)
	// Output:
	// earlier by idle at 30s
	// likely false stop: true
}
