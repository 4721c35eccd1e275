package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// Call gives a handler its own deadline inside a session. The host enforces
// it: the caller gets the deadline error on time, and the event names the
// step that was running.
func ExampleCall() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{})

	entered := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- watchdog.Call(s.Context(), "web_search", 2*time.Second, func(ctx context.Context) error {
			defer watchdog.Step(ctx, "http_get")()
			close(entered)
			<-ctx.Done() // a slow upstream
			return ctx.Err()
		})
	}()
	<-entered
	_ = watchdogtest.Advance(ctx, mock, 2*time.Second, w)
	err := <-result
	fmt.Println(errors.Is(err, watchdog.ErrDeadlineExceeded))
	fmt.Println(err)

	evs, _ := store.Load(ctx, "agent-1")
	last := evs[len(evs)-1]
	fmt.Println(last.Kind, last.Handler, last.DyingSpan)
	// Output:
	// true
	// watchdog: handler "web_search": handler_deadline_exceeded: elapsed 2s, budget 2s (dying span "http_get")
	// runtime.handler.deadline_exceeded web_search http_get
}

// Wait arms the waiting watchdog with the server's timeout. Its fire does
// not cancel the session: it calls back, for example to hand the agent a
// synthetic result on its next turn.
func ExampleSession_Wait() {
	ctx := context.Background()
	mock := newExampleClock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{})

	fired := make(chan uint64, 1)
	gen := s.Wait(0, func(ctx context.Context, s *watchdog.Session, generation uint64) {
		fired <- generation // e.g. emit an empty WaitForEventsResult
	})
	_ = watchdogtest.Advance(ctx, mock, 30*time.Minute, w)
	fmt.Println(<-fired == gen, s.Context().Err())
	// Output:
	// true <nil>
}

// RunPhase retries a phase that ended with a recoverable verdict (here the
// idle rule) and keeps the last partial result.
func ExampleRunPhase() {
	ctx := context.Background()
	mock := newExampleClock()
	w := watchdog.New(watchdog.WithClock(mock))
	defer w.Close(ctx)
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{
		IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off, SettleChecks: 1, RecoveryBackoff: time.Second,
	})

	attempts := make(chan int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		partial, attempts, err := watchdog.RunPhase(s, "implement", 0, func(ctx context.Context, attempt int) (string, error) {
			attempts <- attempt
			if attempt == 1 {
				<-ctx.Done() // the agent hangs silently the first time
				return "draft", context.Cause(ctx)
			}
			return "done", nil
		})
		fmt.Println(attempts, partial, err)
	}()
	<-attempts
	_ = watchdogtest.Advance(ctx, mock, 12*time.Second, w) // idle at 10 s: attempt 1 is cancelled; 1 s backoff
	<-attempts
	<-done
	// Output:
	// 2 done <nil>
}

// Replay re-derives every recorded verdict of a log from the log alone.
func ExampleReplay() {
	ctx := context.Background()
	mock := newExampleClock()
	store := watchdog.NewMemoryStore()
	w := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	s, _ := w.Start(ctx, "agent-1", mock.Now(), watchdog.Policy{IdleWindow: 5 * time.Second, SettleChecks: 1})
	_ = watchdogtest.Advance(ctx, mock, 4*time.Second, w)
	s.Touch(watchdog.ChannelWorkspace) // quiet file work defers the idle fire
	_ = watchdogtest.Advance(ctx, mock, time.Minute, w)
	_ = w.Close(ctx)

	log, _ := store.Load(ctx, "agent-1")
	mismatches, err := watchdog.Replay(log)
	fmt.Println(len(log), len(mismatches), err)

	for i, e := range log {
		if e.Kind == watchdog.KindVerdict {
			log[i].EvidenceSummary[3].LastAt = nil // tamper with the deferral's evidence
			break
		}
	}
	mismatches, _ = watchdog.Replay(log)
	fmt.Println(mismatches[0].Event.Kind, mismatches[0].Recorded)
	// Output:
	// 4 0 <nil>
	// runtime.watchdog.verdict CONTINUE rule=idle active=workspace settle=0
}
