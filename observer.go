package watchdog

import (
	"context"
	"time"
)

// Observer is the Watchdog's hook for metrics and traces; it has no
// dependency, and the otelwatchdog module adapts it to OpenTelemetry. Every
// field is optional; the zero Observer observes nothing. Hooks are called
// without any lock held and must be safe for concurrent use and quick.
type Observer struct {
	// OnEvent is called on the recorder goroutine after each event has been
	// appended to the store (verdicts, decisions, outcomes, handler
	// overruns...). Events the store refused are not reported.
	OnEvent func(e Event)

	// OnHandler is called when a deadline layer (Within, Call, RunPhase)
	// starts, on the caller's goroutine, with the budget left. The context
	// it returns (when not nil) becomes the layer's context, so a tracer
	// can start a span there. The function it returns (when not nil) is
	// called once when the layer ends, with the error the caller gets and
	// the overrun event when the deadline fired (its DyingSpan names the
	// step that was running), so the handler and the verdict it caused
	// share one trace.
	OnHandler func(ctx context.Context, layer Layer, name string, remaining time.Duration) (context.Context, func(err error, overrun *Event))

	// OnSchedulerTick is called after each scheduler pass that found
	// something due, with the pass's lateness: how long after its due
	// instant the most overdue item was handled.
	OnSchedulerTick func(lateness time.Duration)
}
