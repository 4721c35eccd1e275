// Package otelwatchdog adapts the watchdog.Observer hook of
// github.com/sessionwatchdog/watchdog to OpenTelemetry metrics and traces.
// It is a separate module, so the root package stays free of any
// OpenTelemetry dependency.
//
// Wiring:
//
//	obs, err := otelwatchdog.New(
//		otelwatchdog.WithMeterProvider(meterProvider),   // default: otel.GetMeterProvider()
//		otelwatchdog.WithTracerProvider(tracerProvider), // default: otel.GetTracerProvider()
//	)
//	if err != nil {
//		return err
//	}
//	w := watchdog.New(watchdog.WithObserver(obs))
//
// Every deadline layer (watchdog.Call, watchdog.Within, watchdog.RunPhase)
// of a watched session then gets a span, a child of the span in the context
// it was given, and the metrics below. When a layer's deadline fires, its
// span gets a span event named runtime.handler.deadline_exceeded carrying the
// dying step, the budget, the elapsed time and the event_id of the recorded
// overrun event, and an Error status: the handler that was killed and the
// verdict it caused share one trace, and the event_id joins that trace to the
// event log.
//
// Instruments (scope ScopeName; ObserveStats adds the Stats gauges and
// counters, and watchdog_sessions_watched by rule and mode):
//
//	watchdog_handler_deadline_remaining_seconds  float64 gauge      s          handler, layer
//	watchdog_handler_deadline_exceeded_total     int64 counter      {overrun}  handler, layer, dying_span
//	watchdog_scheduler_tick_lateness_seconds     float64 histogram  s          (none)
//	watchdog_events_total                        int64 counter      {event}    event_kind, reason, rule, mode, verdict
//
// Each name is already its Prometheus name (unit word and _total included,
// units "s" or an annotation), so the OpenTelemetry Prometheus exporter
// shows it unchanged with its default options.
//
// Session ids are span attributes only, never metric attributes, so the
// metrics' cardinality is bounded by the number of handler, step and reason
// names.
package otelwatchdog
