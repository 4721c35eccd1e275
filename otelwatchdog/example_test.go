package otelwatchdog_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/otelwatchdog"
)

// A handler overruns its budget while its "http_get" step runs: the overrun
// is counted by dying span, and the handler's span carries the overrun event.
func ExampleNew() {
	ctx := context.Background()
	// In production: your exporters' providers, or none for the globals.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, err := otelwatchdog.New(otelwatchdog.WithMeterProvider(mp), otelwatchdog.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	w := watchdog.New(watchdog.WithObserver(obs))
	defer w.Close(ctx)

	s, err := w.Start(ctx, "demo", time.Now(), watchdog.Policy{WallClock: time.Minute})
	if err != nil {
		panic(err)
	}
	err = watchdog.Call(s.Context(), "web_search", 50*time.Millisecond, func(ctx context.Context) error {
		defer watchdog.Step(ctx, "http_get")()
		<-ctx.Done() // a request that outlives the budget
		return context.Cause(ctx)
	})
	fmt.Println("deadline exceeded:", errors.Is(err, watchdog.ErrDeadlineExceeded))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == otelwatchdog.MetricHandlerDeadlineExceeded {
					for _, dp := range d.DataPoints {
						v, _ := dp.Attributes.Value(otelwatchdog.AttrDyingSpan)
						fmt.Printf("%s{dying_span=%s} %d\n", m.Name, v.AsString(), dp.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					v, _ := dp.Attributes.Value(otelwatchdog.AttrHandler)
					fmt.Printf("%s{handler=%s} %g\n", m.Name, v.AsString(), dp.Value)
				}
			}
		}
	}
	for _, sp := range spans.Ended() {
		for _, ev := range sp.Events() {
			fmt.Printf("span %q: event %s\n", sp.Name(), ev.Name)
		}
	}
	// Output:
	// deadline exceeded: true
	// watchdog_handler_deadline_remaining_seconds{handler=web_search} 0.05
	// watchdog_handler_deadline_exceeded_total{dying_span=http_get} 1
	// span "handler web_search": event runtime.handler.deadline_exceeded
}
