// Command faketime is the code under test of this example: a pipeline step
// loop, Drain, that runs under a watchdog session. The interesting part is
// main_test.go, which shows how to unit-test such code without waiting for
// real time, in two ways:
//
//   - with a *clock.Mock from github.com/benbjohnson/clock, moved by
//     watchdogtest.Advance, which settles every verdict at its exact instant;
//   - inside a testing/synctest bubble (Go 1.25), where the default real
//     clock runs on the bubble's fake time.
//
// Run the tests with: go test ./examples/faketime
//
// Run the program (about two seconds of real time) with:
// go run ./examples/faketime
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Drain processes jobs until the jobs channel is closed or ctx ends. It
// reports each job on out, one line per job. Hand it a session's context
// and a session Writer as out: every line is then evidence of progress on
// the stdout channel, and the watchdog cancels ctx when the session runs
// past its budget or goes silent.
//
// It returns nil when jobs is closed, and context.Cause(ctx) when ctx ended
// first, so the caller can tell why: errors.Is(err,
// watchdog.ErrWallClockExceeded), watchdog.ErrIdleExceeded, ...
func Drain(ctx context.Context, jobs <-chan string, out io.Writer) error {
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case job, ok := <-jobs:
			if !ok {
				return nil
			}
			if _, err := fmt.Fprintf(out, "job %d: %s done\n", n, job); err != nil {
				return err
			}
		}
	}
}

func main() {
	ctx := context.Background()
	w := watchdog.New()
	defer w.Close(ctx)

	// A producer that hands over three jobs and then stalls forever.
	jobs := make(chan string)
	go func() {
		for _, j := range []string{"fetch", "parse", "index"} {
			jobs <- j
			time.Sleep(200 * time.Millisecond)
		}
	}()

	s, err := w.Start(ctx, "drain", time.Now(), watchdog.Policy{WallClock: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = Drain(s.Context(), jobs, s.Writer(watchdog.ChannelStdout, os.Stdout))
	fmt.Println("drain ended:", err)
}
