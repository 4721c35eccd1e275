package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// Begin starts a tool call when the model's tool_use arrives; End closes it
// when the tool_result arrives, here on another goroutine. Nothing of the
// library runs in between, and the call is bounded work that the session's
// idle rule waits for.
func ExampleBegin() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store), watchdog.WithCallRecords(10))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{})

	calls := map[string]*watchdog.CallHandle{} // by tool_use id
	call, err := watchdog.Begin(s.Context(), "bash", watchdog.CallLimits{Cap: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	calls["toolu_01"] = call

	_ = watchdogtest.Advance(ctx, mock, 3*time.Second, w)
	done := make(chan error)
	go func() { // the tool_result, read on the stream's goroutine
		done <- calls["toolu_01"].End(errors.New("exit status 2"))
	}()
	fmt.Println(<-done)
	_ = s.Stop()
	_ = w.Close(ctx)

	evs, _ := store.Load(ctx, "agent-1")
	for _, e := range evs {
		if e.Kind == watchdog.KindCallCompleted {
			fmt.Println(e.Handler, e.MeasureSeconds, e.Reason, e.Error)
		}
	}
	// Output:
	// exit status 2
	// bash 3 error exit status 2
}

// Snapshot reads a live session: each channel's evidence, the calls in
// flight, and when its rules would stop it if nothing more happened.
func ExampleSession_Snapshot() {
	ctx := context.Background()
	mock := newExampleClock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	start := mock.Now()
	s, _ := w.Start(ctx, "agent-1", start, watchdog.Policy{IdleWindow: 30 * time.Second})
	s.Touch(watchdog.ChannelStdout)
	_ = watchdogtest.Advance(ctx, mock, 5*time.Second, w)
	call, _ := watchdog.Begin(s.Context(), "web_search", watchdog.CallLimits{Cap: 2 * time.Minute})
	_ = watchdogtest.Advance(ctx, mock, 5*time.Second, w)

	sn := s.Snapshot()
	for _, e := range sn.Evidence {
		if e.LastAt != nil {
			fmt.Printf("%s: %d, %v ago\n", e.Channel, e.Counter, sn.At.Sub(*e.LastAt))
		}
	}
	fmt.Println("calls in flight:", sn.CallsInFlight, sn.Calls[0].Name)
	fmt.Println("stops at the earliest", sn.StopAt.Sub(start), "by", sn.StopRule)
	_ = call.End(nil)
	// Output:
	// stdout: 1, 10s ago
	// mcp_tool: 1, 5s ago
	// calls in flight: 1 web_search
	// stops at the earliest 2m30s by idle
}
