// Command quickstart runs a pipeline loop under a one-second wall-clock budget
// on the real clock and the embedded in-memory store, then prints the result
// envelope and every event the watchdog recorded.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

func main() {
	ctx := context.Background()
	w := watchdog.New() // in-memory store, real clock, no-op logger

	res, err := w.Run(ctx, "cli-todo", watchdog.Policy{WallClock: time.Second},
		func(ctx context.Context) error {
			for i := 1; ; i++ { // a pipeline loop that would never end by itself
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(300 * time.Millisecond):
					fmt.Println("iteration", i)
				}
			}
		})
	fmt.Println("run ended:", err)

	if err := w.Close(ctx); err != nil { // flushes every pending event
		fmt.Fprintln(os.Stderr, "close:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	fmt.Println("result envelope:")
	_ = out.Encode(res)
	evs, _ := w.Store().Load(ctx, "cli-todo")
	fmt.Println("recorded events:")
	for _, e := range evs {
		_ = out.Encode(e)
	}
}
