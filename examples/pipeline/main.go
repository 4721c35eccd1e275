// Command pipeline runs a phase/iteration loop under a watchdog session, on
// the real clock, in a few seconds:
//
//   - three phases, plan, implement and verify, each run with
//     watchdog.RunPhase under its budget from Policy.PhaseBudgets;
//   - implement is a loop of iterations, each under its own deadline,
//     watchdog.Within(ctx, watchdog.LayerIteration, ...) with
//     Policy.IterationBudget;
//   - one iteration hangs in window 1: its deadline fires (recorded as
//     runtime.handler.deadline_exceeded with the dying step), which is
//     recoverable, so RunPhase retries the phase after the recovery backoff
//     and the phase picks up from its checkpoint;
//   - window 1 then runs out of its wall-clock budget: the watchdog cancels
//     the session, and Run returns the result envelope
//     {"stop_reason_code": "watchdog_wall_clock_exceeded", "resumable": true};
//   - the program resumes the session: Resume opens window 2, a fresh
//     budget, and the loop finishes the remaining iterations from its
//     checkpoint and the verify phase: "completed".
//
// It prints every result envelope and every recorded event, and exits
// non-zero if the story did not happen as told.
//
// Run it with: go run ./examples/pipeline
//
// With -log FILE it also writes the event log to FILE (JSON Lines, the file
// store), to read with the inspector: sessionwatchdog inspect FILE.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// policy: a 1.5 s window, per-phase budgets and a per-iteration budget.
var policy = watchdog.Policy{
	WallClock: 1500 * time.Millisecond,
	PhaseBudgets: map[string]time.Duration{
		"plan":      300 * time.Millisecond,
		"implement": 10 * time.Second, // longer than a window: the wall clock cuts it
		"verify":    300 * time.Millisecond,
	},
	IterationBudget: 200 * time.Millisecond,
	RecoveryBudget:  2,
	RecoveryBackoff: 100 * time.Millisecond,
	HandlerGrace:    200 * time.Millisecond,
}

const (
	sessionID  = "pipeline-7"
	iterations = 20                     // implement's work items
	stepTime   = 80 * time.Millisecond  // one iteration's work
	maxWindows = 5                      // a guard: the story needs 2
	hangAt     = 3                      // the iteration that hangs, once
	hangTime   = 500 * time.Millisecond // longer than IterationBudget
)

// checkpoint is the pipeline's own progress, kept across attempts and
// windows (a real pipeline would persist it next to its output).
type checkpoint struct {
	planned bool
	done    int // implement iterations completed
	hung    bool
}

func main() {
	logPath := flag.String("log", "", "also write the event log to this new JSON Lines `file` (for sessionwatchdog inspect)")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline example:", err)
		os.Exit(1)
	}
}

// run drives the session window by window until the pipeline completes,
// then prints the events and checks the story.
func run(ctx context.Context, out io.Writer, logPath string) error {
	w, closeLog, err := newWatchdog(logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	defer w.Close(ctx)
	cp := &checkpoint{}
	loop := func(ctx context.Context) error { return pipeline(ctx, out, cp) }

	var results []watchdog.Result
	res, err := w.Run(ctx, sessionID, policy, loop)
	for {
		results = append(results, res)
		env, _ := json.Marshal(res)
		fmt.Fprintf(out, "window %d ended: %v\nresult envelope: %s\n\n", res.Window, err, env)
		if !res.Resumable || len(results) == maxWindows {
			break
		}
		s, rerr := w.Resume(ctx, sessionID, policy)
		if rerr != nil {
			return fmt.Errorf("resume: %w", rerr)
		}
		fmt.Fprintf(out, "resumed: window %d, started %s, session started %s, %d of %d iterations already done\n",
			s.Window(), s.Snapshot().WindowStartedAt.Format(time.RFC3339Nano), s.StartedAt().Format(time.RFC3339Nano), cp.done, iterations)
		res, err = s.Run(loop)
	}
	if err := w.Close(ctx); err != nil {
		return err
	}
	events, err := w.Store().Load(ctx, sessionID)
	if err != nil {
		return err
	}
	printEvents(out, events)
	return check(out, results, events, cp)
}

// newWatchdog returns a Watchdog on the in-memory store, or, when logPath
// is not empty, on a new file store at logPath: a JSON Lines event log that
// the inspector reads (sessionwatchdog inspect FILE). The returned func closes the
// file store; call it after the Watchdog's Close.
func newWatchdog(logPath string) (*watchdog.Watchdog, func(), error) {
	if logPath == "" {
		return watchdog.New(), func() {}, nil
	}
	if _, err := os.Stat(logPath); err == nil {
		return nil, nil, fmt.Errorf("event log %s already exists: give a new path (the example's session ids are fixed)", logPath)
	}
	store, err := file.Open(logPath)
	if err != nil {
		return nil, nil, err
	}
	return watchdog.New(watchdog.WithStore(store)), func() { _ = store.Close() }, nil
}

// pipeline is the loop one window runs: the phases not done yet.
func pipeline(ctx context.Context, out io.Writer, cp *checkpoint) error {
	s := watchdog.FromContext(ctx)
	if !cp.planned {
		if _, _, err := watchdog.RunPhase(s, "plan", 0, func(ctx context.Context, attempt int) (struct{}, error) {
			fmt.Fprintln(out, "plan: 20 work items")
			return struct{}{}, sleep(ctx, 50*time.Millisecond)
		}); err != nil {
			return err
		}
		cp.planned = true
	}
	done, attempts, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (int, error) {
		if attempt > 1 {
			fmt.Fprintf(out, "implement: attempt %d, resuming at item %d\n", attempt, cp.done+1)
		}
		for cp.done < iterations {
			item := cp.done + 1
			err := watchdog.Within(ctx, watchdog.LayerIteration, fmt.Sprintf("item-%d", item), 0, func(ctx context.Context) error {
				defer watchdog.Step(ctx, "compile")()
				d := stepTime
				if item == hangAt && !cp.hung {
					cp.hung = true
					d = hangTime // a compiler that hangs, once
				}
				return sleep(ctx, d)
			})
			if err != nil {
				fmt.Fprintf(out, "implement: item %d: %v\n", item, err)
				return cp.done, err
			}
			cp.done = item
		}
		return cp.done, nil
	})
	fmt.Fprintf(out, "implement: phase ended after %d attempt(s), %d of %d items done, error: %v\n",
		attempts, done, iterations, err)
	if err != nil {
		return err
	}
	_, _, err = watchdog.RunPhase(s, "verify", 0, func(ctx context.Context, attempt int) (struct{}, error) {
		fmt.Fprintln(out, "verify: all items pass")
		return struct{}{}, sleep(ctx, 50*time.Millisecond)
	})
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func printEvents(out io.Writer, events []watchdog.Event) {
	fmt.Fprintln(out, "recorded events:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  seq\twindow\t+s\tkind\tdetail")
	for _, e := range events {
		var d []string
		add := func(k, v string) {
			if v != "" {
				d = append(d, k+"="+v)
			}
		}
		add("reason", e.Reason)
		if e.Attempt > 0 {
			add("attempt", fmt.Sprint(e.Attempt))
		}
		add("handler", e.Handler)
		add("layer", e.Layer)
		add("dying_span", e.DyingSpan)
		if e.LimitSeconds > 0 {
			add("limit_seconds", fmt.Sprintf("%.3g", e.LimitSeconds))
		}
		fmt.Fprintf(tw, "  %d\t%d\t%.2f\t%s\t%s\n", e.Seq, e.Window, e.ElapsedSeconds, e.Kind, strings.Join(d, " "))
	}
	_ = tw.Flush()
}

// check returns an error unless window 1 had a recovered iteration deadline
// and ended on the wall clock, and a resumed window completed the work.
func check(out io.Writer, results []watchdog.Result, events []watchdog.Event, cp *checkpoint) error {
	var problems []string
	want := func(ok bool, what string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(what, args...))
		}
	}
	count := func(match func(e watchdog.Event) bool) int {
		n := 0
		for _, e := range events {
			if match(e) {
				n++
			}
		}
		return n
	}
	first, last := results[0], results[len(results)-1]
	want(first.Window == 1 && first.StopReasonCode == "watchdog_wall_clock_exceeded" && first.Resumable,
		"window 1 ended with %q (window %d), want %q, resumable", first.StopReasonCode, first.Window, "watchdog_wall_clock_exceeded")
	want(len(results) >= 2 && last.StopReasonCode == watchdog.StopCompleted && !last.Resumable,
		"the last window ended with %q, want %q", last.StopReasonCode, watchdog.StopCompleted)
	want(cp.done == iterations, "%d of %d items done", cp.done, iterations)
	want(count(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindHandlerDeadline && e.Layer == string(watchdog.LayerIteration) &&
			e.Handler == fmt.Sprintf("item-%d", hangAt) && e.DyingSpan == "compile"
	}) >= 1, "want an iteration deadline event for item-%d with dying_span compile", hangAt)
	want(count(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindRetry && e.Handler == "implement" && e.Attempt == 2
	}) >= 1, "want a retry event of phase implement, attempt 2")
	want(count(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindCancel && e.Window == 1 && e.Reason == "wall_clock_exceeded"
	}) == 1, "want one wall-clock cancel event in window 1")
	want(count(func(e watchdog.Event) bool { return e.Kind == watchdog.KindResume && e.Window == 2 }) == 1,
		"want one resume event opening window 2")
	want(count(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindStop && e.Reason == watchdog.StopCompleted
	}) == 1, "want one stop event with reason completed")
	mismatches, err := watchdog.Replay(events)
	want(err == nil && len(mismatches) == 0, "replay: %d mismatches, error %v", len(mismatches), err)
	if len(problems) > 0 {
		return errors.New("the story did not happen as expected:\n  - " + strings.Join(problems, "\n  - "))
	}
	fmt.Fprintf(out, "\nOK: an iteration overran and its phase was retried, window 1 was cut by the wall clock, window 2 resumed from the checkpoint and completed (%d windows).\n", len(results))
	return nil
}
