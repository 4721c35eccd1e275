// Command systemd is a recipe: a service under systemd's watchdog that
// sends WATCHDOG=1 only while its Watchdog answers.
//
// systemd's watchdog (WatchdogSec=) restarts a process that stopped
// pinging; the watchdog library cancels a session that stalled, with a
// recorded reason. They watch different things, and this recipe chains
// them: the process pings systemd every half of WATCHDOG_USEC, but only
// after w.Check(ctx) returned nil within half of that interval. Check is a
// round trip through the Watchdog's scheduler goroutine, its action
// goroutines and its recorder, so a ping means that every verdict due has
// been decided and applied and the recording of every event due has been
// attempted. A wedged scheduler, or a store whose Append hangs, withholds the
// ping, and systemd restarts the process once WatchdogSec passes without
// one; a Close (the Watchdog is gone) ends the pings for good. The sessions
// left open by the dead process stay resumable: the next process calls
// Resume.
//
// A unit for it:
//
//	[Service]
//	Type=notify
//	ExecStart=/usr/local/bin/agent-orchestrator
//	WatchdogSec=30s
//	Restart=on-failure
//
// The sd_notify client is sdnotify.go: NOTIFY_SOCKET, WATCHDOG_USEC and
// WATCHDOG_PID, standard library only. Run it with
// `go run ./examples/systemd`; outside systemd (NOTIFY_SOCKET unset) it
// says so and runs its session without pings; -for sets the session's
// budget (2 s by default).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
)

func main() {
	runFor := flag.Duration("for", 2*time.Second, "the session's wall-clock budget")
	flag.Parse()
	if err := run(*runFor); err != nil {
		fmt.Fprintln(os.Stderr, "systemd example:", err)
		os.Exit(1)
	}
}

func run(budget time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := watchdog.New()

	n, err := dialNotify(ctx)
	if err != nil {
		return err
	}
	defer n.Close()
	interval, err := pingInterval()
	if err != nil {
		return err
	}
	kaCtx, stopPings := context.WithCancel(ctx)
	pings := make(chan error, 1)
	switch {
	case n != nil && interval > 0:
		go func() {
			pings <- keepAlive(kaCtx, w, clock.New(), n, interval, interval/2, func(err error) {
				fmt.Fprintln(os.Stderr, "health probe failed, WATCHDOG=1 withheld:", err)
			})
		}()
	case n != nil:
		pings <- n.notify("READY=1") // Type=notify without WatchdogSec=
	default:
		fmt.Println("not under systemd (NOTIFY_SOCKET unset): running without pings")
		pings <- nil
	}

	res, err := w.Run(ctx, "systemd-demo", watchdog.Policy{WallClock: budget}, func(ctx context.Context) error {
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(500 * time.Millisecond):
				fmt.Println("iteration", i)
			}
		}
	})
	fmt.Printf("session ended: %s (%v)\n", res.StopReasonCode, err)

	_ = n.notify("STOPPING=1")
	stopPings()
	if err := <-pings; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if err := w.Close(context.Background()); err != nil {
		return err
	}
	if !errors.Is(err, watchdog.ErrWallClockExceeded) && ctx.Err() == nil {
		return fmt.Errorf("the session ended with %v, want its wall-clock budget", err)
	}
	return nil
}

// keepAlive tells the service manager the service is ready (READY=1), then
// every interval on clk probes w with w.Check and sends WATCHDOG=1 if the
// probe answered nil within probeTimeout. A probe that fails or times out
// withholds that ping only, and is passed to missed (if not nil); the next
// interval probes again. Keep interval + probeTimeout below WatchdogSec:
// with interval half of it (pingInterval) and probeTimeout half of the
// interval, a healthy process pings at most 0.75 x WatchdogSec apart.
//
// keepAlive returns watchdog.ErrClosed once the Watchdog is closed (it
// never pings again, so systemd acts after WatchdogSec unless the process
// exits first), ctx's error when ctx ends, and the error of a message it
// could not send. Timers run on clk only (AfterFunc), so a *clock.Mock
// drives it in tests.
func keepAlive(ctx context.Context, w *watchdog.Watchdog, clk clock.Clock, n *notifier, interval, probeTimeout time.Duration, missed func(error)) error {
	if interval <= 0 || probeTimeout <= 0 {
		return fmt.Errorf("keepAlive: interval %v and probe timeout %v must be positive", interval, probeTimeout)
	}
	if err := n.notify("READY=1"); err != nil {
		return err
	}
	tick := make(chan struct{}, 1)
	for {
		t := clk.AfterFunc(interval, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-tick:
		}
		err := probe(ctx, w, clk, probeTimeout)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, watchdog.ErrClosed):
			return err
		case err != nil:
			if missed != nil {
				missed(err)
			}
		default:
			if err := n.notify("WATCHDOG=1"); err != nil {
				return err
			}
		}
	}
}

// probe calls w.Check with a deadline of timeout on clk.
func probe(ctx context.Context, w *watchdog.Watchdog, clk clock.Clock, timeout time.Duration) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := clk.AfterFunc(timeout, cancel)
	defer t.Stop()
	if err := w.Check(pctx); err != nil {
		if pctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("w.Check did not answer within %v", timeout)
		}
		return err
	}
	return nil
}
