// Command suture is a recipe: a suture supervisor tree
// (github.com/thejerf/suture/v4) restarts a pipeline loop that the watchdog
// cancelled, and every restart resumes the session into its next window.
//
// The watchdog notices the stall (a loop silent past its idle window) and
// records the verdict; suture runs the next window, with its failure
// threshold and backoff. Run it with `go run .` from this directory: the
// loop stalls in windows 1 and 2, is cancelled each time with a recorded
// idle verdict, and completes in window 3. It prints the supervisor's
// events and the session's recorded events, and exits non-zero when that
// story did not happen.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/thejerf/suture/v4"

	"github.com/sessionwatchdog/watchdog"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "suture example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := watchdog.New() // in-memory store, real clock

	ended := make(chan watchdog.Result, 3)
	svc := &Service{
		W:  w,
		ID: "agent-7",
		Policy: watchdog.Policy{
			WallClock:    10 * time.Second,
			IdleWindow:   300 * time.Millisecond, // silent for more than 300 ms is stale...
			SettleChecks: 1,                      // ...and one stale look is enough
			EvidenceTTL:  watchdog.Off,           // stdout is the only evidence here
		},
		Loop: func(ctx context.Context) error {
			s := watchdog.FromContext(ctx)
			out := s.Writer(watchdog.ChannelStdout, os.Stdout)
			fmt.Fprintf(out, "window %d: working\n", s.Window())
			if s.Window() < 3 {
				<-ctx.Done() // stalled: no output, no progress
				return context.Cause(ctx)
			}
			fmt.Fprintf(out, "window %d: done\n", s.Window())
			return nil
		},
		Ended: func(res watchdog.Result, err error) {
			fmt.Printf("window %d ended: %s (%v)\n", res.Window, res.StopReasonCode, err)
			ended <- res
		},
	}
	sup := suture.New("agents", suture.Spec{
		EventHook: func(e suture.Event) { fmt.Println("suture:", e) },
	})
	sup.Add(svc)
	supDone := sup.ServeBackground(ctx)

	var last watchdog.Result
	for last.StopReasonCode != watchdog.StopCompleted {
		select {
		case last = <-ended:
		case <-ctx.Done():
			return fmt.Errorf("the session did not complete: %w", ctx.Err())
		}
	}
	cancel() // stop the supervisor: the service was removed already
	<-supDone
	if err := w.Close(context.Background()); err != nil {
		return err
	}
	evs, err := w.Store().Load(context.Background(), svc.ID)
	if err != nil {
		return err
	}
	fmt.Println("recorded events:")
	out := json.NewEncoder(os.Stdout)
	cancels := 0
	for _, e := range evs {
		if e.Kind == watchdog.KindCancel && e.Reason == "idle_exceeded" {
			cancels++
		}
		_ = out.Encode(struct {
			Kind   string `json:"event_kind"`
			Window int    `json:"window"`
			Reason string `json:"reason,omitempty"`
		}{e.Kind, e.Window, e.Reason})
	}
	if last.Window != 3 || cancels != 2 {
		return fmt.Errorf("got completion in window %d after %d idle cancels, want window 3 after 2", last.Window, cancels)
	}
	return nil
}
