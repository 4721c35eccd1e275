package watchdog_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// FromContext finds the session a context belongs to, so that code deep in
// a call chain records evidence without the *Session passed down. Here
// quiet file work defers the idle rule.
func ExampleFromContext() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{IdleWindow: 10 * time.Second, SettleChecks: 1})

	_ = watchdogtest.Advance(ctx, mock, 8*time.Second, w)
	reindex(s.Context()) // no output, but work
	_ = watchdogtest.Advance(ctx, mock, 5*time.Second, w)

	evs, _ := store.Load(ctx, "agent-1")
	for _, e := range evs {
		fmt.Println(strings.TrimSpace(e.Kind + " " + e.ActiveChannel))
	}
	fmt.Println("cancelled:", s.Context().Err() != nil)
	// Output:
	// runtime.watchdog.start
	// runtime.watchdog.verdict workspace
	// cancelled: false
}

// reindex is code that knows only a context.
func reindex(ctx context.Context) {
	if s := watchdog.FromContext(ctx); s != nil { // nil outside a session
		s.Touch(watchdog.ChannelWorkspace)
	}
}

// Call records a tool call by itself: while it runs, the idle rule waits
// for it (active_channel handler); its start and its end are evidence on
// the mcp_tool channel, so the instant it returns is not taken for silence;
// and with WithCallRecords its end is recorded. Never Touch around a Call.
func ExampleCall_evidence() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store), watchdog.WithCallRecords(16))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{
		IdleWindow: 10 * time.Second, EvidenceTTL: 5 * time.Second, SettleChecks: 1,
	})

	err := watchdog.Call(s.Context(), "web_search", time.Minute, func(context.Context) error {
		// The search takes 15 s, and the agent prints nothing meanwhile.
		return watchdogtest.Advance(ctx, mock, 15*time.Second, w)
	})
	_ = watchdogtest.Advance(ctx, mock, time.Second, w)
	fmt.Println("call:", err)

	evs, _ := store.Load(ctx, "agent-1")
	for _, e := range evs {
		fmt.Println(strings.TrimSpace(fmt.Sprint(e.ElapsedSeconds, " ", e.Kind, " ", e.ActiveChannel, " ", e.Handler, " ", e.Reason)))
	}
	// Output:
	// call: <nil>
	// 0 runtime.watchdog.start
	// 10.000000001 runtime.watchdog.verdict handler
	// 15 runtime.handler.completed  web_search ok
	// 15 runtime.watchdog.verdict mcp_tool
}
