package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// This file holds the program of the README's "Your first orchestrator":
// supervise and runAgent are that program, and the README quotes them
// (TestExampleREADMESnippetsAreExcerpts checks that every quote matches).
// TestExampleOrchestrator runs it inside a testing/synctest bubble, where
// the default real clock runs on fake time.

// supervise runs the agent as session "agent-1" under a watchdog that
// records every event to the log at logPath, and reports how it ended.
func supervise(ctx context.Context, logPath string) (watchdog.Result, error) {
	store, err := file.Open(logPath) // the event log: JSON Lines, one event a line
	if err != nil {
		return watchdog.Result{}, err
	}
	defer store.Close()
	w := watchdog.New(watchdog.WithStore(store)) // the real clock
	defer w.Close(ctx)                           // records every pending event

	policy := watchdog.Policy{
		WallClock:  time.Hour,        // the window's budget: nothing extends it
		IdleWindow: 30 * time.Second, // stdout silent for longer than this is stale
	}
	s, err := w.Start(ctx, "agent-1", time.Now(), policy) // time.Now(): the Watchdog's clock
	if err != nil {
		return watchdog.Result{}, err
	}
	return s.Run(runAgent) // runAgent gets the session's context
}

// runAgent is the session's work.
func runAgent(ctx context.Context) error {
	s := watchdog.FromContext(ctx)                     // the session ctx belongs to
	out := s.Writer(watchdog.ChannelStdout, os.Stdout) // every write is evidence
	fmt.Fprintln(out, "agent: planning")

	// A tool call under its own deadline: it begins here and ends with its
	// result, as a model's tool_use and tool_result do (End may be called on
	// another goroutine). It is mcp_tool evidence as it begins and as it
	// ends: touch nothing around it.
	call, err := watchdog.Begin(ctx, "web_search", watchdog.CallLimits{Cap: 2 * time.Minute})
	if err != nil {
		return err
	}
	err = webSearch(call.Context(), "fsnotify recursive watch")
	if err = call.End(err); err != nil { // the call's deadline error if it fired first
		return err
	}
	return think(ctx) // the agent hangs here, silent
}

// webSearch stands for a slow tool: it answers after 45 s.
func webSearch(ctx context.Context, query string) error {
	select {
	case <-time.After(45 * time.Second):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// think stands for an agent that hangs silently until the watchdog stops it.
func think(ctx context.Context) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// TestExampleOrchestrator runs the README's program inside a
// testing/synctest bubble: the slow tool call and the silence after it are
// fake time, so the story takes no real time and its instants are exact.
func TestExampleOrchestrator(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "agent.jsonl")
	var res watchdog.Result
	var err error
	synctest.Test(t, func(t *testing.T) {
		res, err = supervise(context.Background(), logPath)
	})

	t.Logf("%+v", res)
	want := watchdog.Result{
		SessionID:      "agent-1",
		StopReasonCode: "watchdog_idle_exceeded",         // the idle rule stopped it
		Resumable:      true,                             // a Resume opens window 2
		Window:         1,                                // the window that ended
		Elapsed:        95*time.Second + time.Nanosecond, // 1m35.000000001s
	}
	if got := res; got != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	var v *watchdog.VerdictError
	if errors.As(err, &v) { // the watchdog ended the session: err is its verdict
		t.Logf("rule %s, stdout silent %v, recoverable %v, decision %s", v.Rule, v.Elapsed, v.Recoverable, v.DecisionID)
	}
	if !errors.Is(err, watchdog.ErrIdleExceeded) || v == nil || v.Rule != "idle" {
		t.Errorf("error %v, want the idle rule's *VerdictError", err)
	}

	// The log the inspector reads: the call in flight, then its end, defer
	// the idle rule; three stale looks 10 s apart stop the session.
	store, err := file.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	evs, err := store.Load(context.Background(), "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range evs {
		lines = append(lines, fmt.Sprintf("%3.0f %s %s %s", e.ElapsedSeconds, e.Kind, e.ActiveChannel, e.Reason))
	}
	t.Log("\n" + strings.Join(lines, "\n"))
	wantLog := []string{
		"  0 runtime.watchdog.start  ",
		" 30 runtime.watchdog.verdict handler ",
		" 45 runtime.watchdog.verdict mcp_tool ",
		" 75 runtime.watchdog.verdict none ",
		" 85 runtime.watchdog.verdict none ",
		" 95 runtime.watchdog.decision none idle_exceeded",
		" 95 runtime.watchdog.cancel  idle_exceeded",
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(wantLog, "\n") {
		t.Errorf("the log is\n%s\nwant\n%s", got, strings.Join(wantLog, "\n"))
	}
}
