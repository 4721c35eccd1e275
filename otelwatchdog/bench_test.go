package otelwatchdog_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/otelwatchdog"
)

// The cost of the hooks of one deadline layer that returns in time (span
// start and end, gauge), and of one recorded event, on the SDK providers.
func BenchmarkHooks(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider() // sampled, no processor
	obs, err := otelwatchdog.New(otelwatchdog.WithMeterProvider(mp), otelwatchdog.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("layer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, end := obs.OnHandler(ctx, watchdog.LayerHandler, "web_search", 2*time.Second)
			end(nil, nil)
		}
	})
	b.Run("event", func(b *testing.B) {
		e := watchdog.Event{Kind: watchdog.KindCancel, Reason: "wall_clock_exceeded", Rule: "wall_clock"}
		b.ReportAllocs()
		for b.Loop() {
			obs.OnEvent(e)
		}
	})
	b.Run("tick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obs.OnSchedulerTick(time.Millisecond)
		}
	})
}
