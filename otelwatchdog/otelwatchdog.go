package otelwatchdog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwatchdog/watchdog"
)

// ScopeName is the instrumentation scope name of the Meter and the Tracer
// the adapter creates.
const ScopeName = "github.com/sessionwatchdog/watchdog/otelwatchdog"

// Instrument names. They are part of the adapter's contract; the README
// lists their kinds, units and attributes. Each name is already the
// Prometheus name: it ends with its unit's Prometheus word ("seconds") and
// a counter's with "_total", and its unit is the UCUM base unit ("s") or an
// annotation ("{event}") the exporter drops, so the OpenTelemetry Prometheus
// exporter (go.opentelemetry.io/otel/exporters/prometheus) shows the same
// name with its default options and with every translation strategy.
const (
	// MetricHandlerDeadlineRemaining is a float64 gauge, unit "s": the
	// budget a deadline layer (handler, iteration or phase) has left when
	// it starts, by handler and layer.
	MetricHandlerDeadlineRemaining = "watchdog_handler_deadline_remaining_seconds"
	// MetricHandlerDeadlineExceeded is an int64 counter, unit "{overrun}":
	// deadline layers whose deadline fired, by handler, layer and
	// dying_span.
	MetricHandlerDeadlineExceeded = "watchdog_handler_deadline_exceeded_total"
	// MetricSchedulerTickLateness is a float64 histogram, unit "s": per
	// scheduler pass that found something due, how long after its due
	// instant the most overdue item was handled.
	MetricSchedulerTickLateness = "watchdog_scheduler_tick_lateness_seconds"
	// MetricEvents is an int64 counter, unit "{event}": the events the
	// Watchdog recorded (verdicts, decisions, cancels, overruns...), by
	// event_kind, reason, rule, mode and verdict.
	MetricEvents = "watchdog_events_total"
)

// The instruments of ObserveStats: one per watchdog.Stats field, observed
// at each collection, without attributes.
const (
	// MetricSessions is an int64 gauge, unit "{session}": windows being
	// watched (Stats.Sessions).
	MetricSessions = "watchdog_sessions"
	// MetricQueued is an int64 gauge, unit "{event}": records waiting for
	// the store (Stats.Queued); from 262,144 on, new sessions are refused.
	MetricQueued = "watchdog_queued_events"
	// MetricOldestQueued is a float64 gauge, unit "s": how long the record
	// queued longest has waited for the store (Stats.OldestQueued).
	MetricOldestQueued = "watchdog_oldest_queued_seconds"
	// MetricCoalesced is an int64 counter, unit "{event}": CONTINUE
	// records folded into a later one while the queue was full
	// (Stats.Coalesced).
	MetricCoalesced = "watchdog_coalesced_events_total"
	// MetricHungAppends is an int64 gauge, unit "{call}": store Appends
	// past their timeout that have not returned (Stats.HungAppends).
	MetricHungAppends = "watchdog_hung_appends"
	// MetricFailingActions is an int64 gauge, unit "{session}": sessions
	// whose action failed and is retried after a backoff
	// (Stats.FailingActions).
	MetricFailingActions = "watchdog_failing_actions"
	// MetricPanics is an int64 counter, unit "{panic}": panics recovered
	// from user code (Stats.Panics).
	MetricPanics = "watchdog_panics_total"
	// MetricAbandonedHandlers is an int64 counter, unit "{handler}":
	// functions abandoned past their deadline and grace
	// (Stats.AbandonedHandlers).
	MetricAbandonedHandlers = "watchdog_handler_abandoned_total"
	// MetricAbandonedRunning is an int64 gauge, unit "{handler}": the
	// abandoned functions still running (Stats.AbandonedRunning).
	MetricAbandonedRunning = "watchdog_handler_abandoned_running"
	// MetricLeaseRenewals and MetricLeaseFailures are int64 counters, unit
	// "{heartbeat}": lease heartbeats that renewed the lease and that failed
	// (Stats.LeaseRenewals, Stats.LeaseFailures; with a Leaser store).
	MetricLeaseRenewals = "watchdog_lease_renewals_total"
	MetricLeaseFailures = "watchdog_lease_failures_total"
	// MetricAdopted is an int64 counter, unit "{window}": windows adopted
	// from lost owners (Stats.Adopted).
	MetricAdopted = "watchdog_adopted_windows_total"
	// MetricDisowned is an int64 counter, unit "{window}": sessions no
	// longer watched because another owner holds their window
	// (Stats.Disowned).
	MetricDisowned = "watchdog_disowned_windows_total"
	// MetricSessionsWatched is an int64 gauge, unit "{session}", by rule
	// and mode: the windows being watched whose policy arms the rule in
	// that mode (Watchdog.SessionsByRule). The wall_clock rule is armed in
	// every window, so its act and shadow series add up to MetricSessions.
	// The four built-in rules are always observed, at 0 when no window has
	// them in that mode; a liveness rule only while a window declares it.
	MetricSessionsWatched = "watchdog_sessions_watched"
)

// Metric attribute keys. MetricHandlerDeadlineRemaining has handler and
// layer; MetricHandlerDeadlineExceeded has handler, layer and dying_span
// (always, "" when no step was marked); MetricEvents has event_kind and,
// when the event sets them, reason, rule, mode and verdict.
const (
	// AttrHandler is the deadline layer's name (the handler, phase or
	// iteration name given to Call, Within or RunPhase).
	AttrHandler = attribute.Key("handler")
	// AttrLayer is the deadline layer: "handler", "iteration" or "phase".
	AttrLayer = attribute.Key("layer")
	// AttrDyingSpan is the step (watchdog.Step) running when the deadline
	// fired; "" when no step was marked.
	AttrDyingSpan = attribute.Key("dying_span")
	// AttrEventKind is the recorded event's event_kind.
	AttrEventKind = attribute.Key("event_kind")
	// AttrReason is the event's reason.
	AttrReason = attribute.Key("reason")
	// AttrRule is the rule behind the event, or on MetricSessionsWatched
	// the rule counted.
	AttrRule = attribute.Key("rule")
	// AttrMode is a decision's mode, or on MetricSessionsWatched the
	// rule's mode: "act" or "shadow".
	AttrMode = attribute.Key("mode")
	// AttrVerdict is the event's verdict: "CONTINUE" or "HARD_STOP".
	AttrVerdict = attribute.Key("verdict")
)

// Span attribute keys, on the span of a deadline layer and on its overrun
// span event.
const (
	// SpanAttrSessionID is the watched session's id (absent when the
	// layer's context carries no session).
	SpanAttrSessionID = attribute.Key("watchdog.session_id")
	// SpanAttrWindow is the session's window number.
	SpanAttrWindow = attribute.Key("watchdog.window")
	// SpanAttrLayer is the deadline layer: "handler", "iteration" or
	// "phase".
	SpanAttrLayer = attribute.Key("watchdog.layer")
	// SpanAttrHandler is the layer's name.
	SpanAttrHandler = attribute.Key("watchdog.handler")
	// SpanAttrBudgetMS is the layer's budget in milliseconds: the budget
	// left at its start on the span, the budget on the overrun event.
	SpanAttrBudgetMS = attribute.Key("watchdog.budget_ms")
	// SpanAttrDeadlineExceeded is true on the span of a layer whose
	// deadline fired.
	SpanAttrDeadlineExceeded = attribute.Key("watchdog.deadline_exceeded")
	// SpanAttrDyingSpan is the step running when the deadline fired.
	SpanAttrDyingSpan = attribute.Key("watchdog.dying_span")
	// SpanAttrElapsedMS is the layer's age at the fire, in milliseconds.
	SpanAttrElapsedMS = attribute.Key("watchdog.elapsed_ms")
	// SpanAttrEventID is the event_id of the recorded overrun event, which
	// joins the trace to the event log.
	SpanAttrEventID = attribute.Key("watchdog.event_id")
	// SpanAttrReason is the overrun's reason ("handler_deadline_exceeded",
	// "iteration_deadline_exceeded", "phase_deadline_exceeded").
	SpanAttrReason = attribute.Key("watchdog.reason")
	// SpanAttrRule is the overrun's rule ("handler_deadline", ...).
	SpanAttrRule = attribute.Key("watchdog.rule")
	// SpanAttrOccurredAt is the overrun's occurred_at on the Watchdog's
	// clock, RFC 3339 with nanoseconds; the span event's own timestamp is
	// when the layer ended (the caller got the error).
	SpanAttrOccurredAt = attribute.Key("watchdog.occurred_at")
)

// defaultLatenessBuckets are the bucket boundaries, in seconds, of
// MetricSchedulerTickLateness unless WithLatenessBuckets says otherwise:
// 0 and 100 µs to 10 s.
var defaultLatenessBuckets = []float64{0, 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Option configures New.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	buckets []float64
}

// WithLatenessBuckets sets the explicit bucket boundaries, in seconds and
// increasing, advised for MetricSchedulerTickLateness. The default is 0,
// 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
// 1, 2.5, 5 and 10; no boundaries (nil) also means the default. A View on the
// MeterProvider overrides either.
func WithLatenessBuckets(bounds ...float64) Option {
	bounds = append([]float64(nil), bounds...)
	return func(c *config) { c.buckets = bounds }
}

// WithMeterProvider sets the MeterProvider the instruments are created
// from. The default, and a nil mp, is the global one (otel.GetMeterProvider)
// at the time New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the TracerProvider the layer spans are started
// from. The default, and a nil tp, is the global one (otel.GetTracerProvider)
// at the time New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// newConfig applies opts; a nil MeterProvider or TracerProvider is the
// global one.
func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// adapter holds the instruments; its methods are the Observer's hooks.
type adapter struct {
	tracer    trace.Tracer
	remaining metric.Float64Gauge
	exceeded  metric.Int64Counter
	lateness  metric.Float64Histogram
	events    metric.Int64Counter

	attrs attrCache
}

// attrCacheSize bounds the attribute sets the adapter keeps; past it, sets
// are built on each measurement (correct, only slower).
const attrCacheSize = 4096

// attrCache keeps the attribute set of each distinct label combination, so a
// hook builds and sorts it once; the label values are bounded names
// (layers, handlers, steps, kinds, reasons), as metric attributes must be.
type attrCache struct {
	m sync.Map // attrKey -> metric.MeasurementOption
	n atomic.Int64
}

type attrKey struct {
	metric string
	a      [5]string
}

func (c *attrCache) get(k attrKey, build func() []attribute.KeyValue) metric.MeasurementOption {
	if o, ok := c.m.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(build()...))
	if c.n.Load() < attrCacheSize {
		if _, loaded := c.m.LoadOrStore(k, o); !loaded {
			c.n.Add(1)
		}
	}
	return o
}

// New creates the instruments once and returns a watchdog.Observer whose
// hooks record them and trace every deadline layer:
//
//   - OnHandler records MetricHandlerDeadlineRemaining and starts a span
//     named "<layer> <name>" (for example "handler web_search"), a child of
//     the span in the caller's context, and returns the context carrying it
//     (the layer's function runs under it).
//   - When the layer ends, if the deadline fired, the function OnHandler
//     returned adds
//     MetricHandlerDeadlineExceeded and a span event named after the
//     overrun's event_kind (runtime.handler.deadline_exceeded) with its
//     dying span, budget, elapsed time and event_id; when the layer ended
//     with an error it sets the span's status to Error. It ends the span.
//   - OnSchedulerTick records MetricSchedulerTickLateness.
//   - OnEvent adds MetricEvents.
//
// The measurements of OnHandler and its end function are made with the
// layer's context, so an SDK that keeps exemplars links them to the layer's
// span. The hooks are safe for concurrent use and do not block. The
// Observer can serve any number of Watchdogs.
//
// New returns an error only if the MeterProvider refuses an instrument; the
// Observer it returns with that error is still usable (the SDK hands back
// no-op instruments for the refused ones).
func New(opts ...Option) (watchdog.Observer, error) {
	c := newConfig(opts)
	if len(c.buckets) == 0 {
		c.buckets = defaultLatenessBuckets
	}
	meter := c.mp.Meter(ScopeName)
	a := &adapter{tracer: c.tp.Tracer(ScopeName)}
	var errs [4]error
	a.remaining, errs[0] = meter.Float64Gauge(MetricHandlerDeadlineRemaining,
		metric.WithUnit("s"),
		metric.WithDescription("Budget a deadline layer (handler, iteration, phase) has left when it starts."))
	a.exceeded, errs[1] = meter.Int64Counter(MetricHandlerDeadlineExceeded,
		metric.WithUnit("{overrun}"),
		metric.WithDescription("Deadline layers whose deadline fired, by the step that was running (dying_span)."))
	a.lateness, errs[2] = meter.Float64Histogram(MetricSchedulerTickLateness,
		metric.WithUnit("s"),
		metric.WithDescription("How late the watchdog scheduler handled the most overdue item of a pass."),
		metric.WithExplicitBucketBoundaries(c.buckets...))
	a.events, errs[3] = meter.Int64Counter(MetricEvents,
		metric.WithUnit("{event}"),
		metric.WithDescription("Events the watchdog recorded (verdicts, decisions, cancels, overruns), by kind and reason."))
	return watchdog.Observer{
		OnEvent:         a.onEvent,
		OnHandler:       a.onHandler,
		OnSchedulerTick: a.onSchedulerTick,
	}, errors.Join(errs[:]...)
}

func (a *adapter) onHandler(ctx context.Context, layer watchdog.Layer, name string, remaining time.Duration) (context.Context, func(error, *watchdog.Event)) {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs,
		SpanAttrLayer.String(string(layer)),
		SpanAttrHandler.String(name),
		SpanAttrBudgetMS.Float64(ms(remaining)))
	if s := watchdog.FromContext(ctx); s != nil {
		attrs = append(attrs, SpanAttrSessionID.String(s.ID()), SpanAttrWindow.Int(s.Window()))
	}
	ctx, span := a.tracer.Start(ctx, string(layer)+" "+name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	a.remaining.Record(ctx, remaining.Seconds(), a.attrs.get(attrKey{metric: MetricHandlerDeadlineRemaining, a: [5]string{name, string(layer)}},
		func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrHandler.String(name), AttrLayer.String(string(layer))}
		}))
	return ctx, func(err error, overrun *watchdog.Event) { a.onHandlerEnd(ctx, span, layer, name, err, overrun) }
}

func (a *adapter) onHandlerEnd(ctx context.Context, span trace.Span, layer watchdog.Layer, name string, err error, overrun *watchdog.Event) {
	if overrun != nil {
		a.exceeded.Add(ctx, 1, a.attrs.get(attrKey{metric: MetricHandlerDeadlineExceeded, a: [5]string{name, string(layer), overrun.DyingSpan}},
			func() []attribute.KeyValue {
				return []attribute.KeyValue{AttrHandler.String(name), AttrLayer.String(string(layer)), AttrDyingSpan.String(overrun.DyingSpan)}
			}))
		span.SetAttributes(SpanAttrDeadlineExceeded.Bool(true), SpanAttrDyingSpan.String(overrun.DyingSpan))
		span.AddEvent(overrun.Kind, trace.WithAttributes(
			SpanAttrEventID.String(overrun.ID),
			SpanAttrDyingSpan.String(overrun.DyingSpan),
			SpanAttrBudgetMS.Float64(overrun.LimitSeconds*1000),
			SpanAttrElapsedMS.Float64(overrun.MeasureSeconds*1000),
			SpanAttrReason.String(overrun.Reason),
			SpanAttrRule.String(overrun.Rule),
			SpanAttrOccurredAt.String(overrun.OccurredAt.UTC().Format(time.RFC3339Nano)),
		))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (a *adapter) onSchedulerTick(lateness time.Duration) {
	a.lateness.Record(context.Background(), lateness.Seconds())
}

// verdict is the verdict label the log records beside an event of kind.
func verdict(kind string) string {
	switch kind {
	case watchdog.KindVerdict, watchdog.KindWaitTimeout:
		return "CONTINUE"
	case watchdog.KindDecision, watchdog.KindCancel, watchdog.KindAttemptCancelled:
		return "HARD_STOP"
	}
	return ""
}

func (a *adapter) onEvent(e watchdog.Event) {
	k := attrKey{metric: MetricEvents, a: [5]string{e.Kind, e.Reason, e.Rule, string(e.Mode), verdict(e.Kind)}}
	a.events.Add(context.Background(), 1, a.attrs.get(k, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{AttrEventKind.String(e.Kind)}
		for i, key := range [...]attribute.Key{AttrReason, AttrRule, AttrMode, AttrVerdict} {
			if v := k.a[i+1]; v != "" {
				attrs = append(attrs, key.String(v))
			}
		}
		return attrs
	}))
}

// ms converts d to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ObserveStats registers w's Stats as observable instruments (MetricSessions,
// MetricQueued, ...) and w's SessionsByRule as MetricSessionsWatched, on the
// MeterProvider of opts (WithMeterProvider; the other options do not
// apply): one call of w.Stats and one of w.SessionsByRule per collection,
// with no cost between collections. Register one Watchdog per
// MeterProvider: the instruments carry no attribute naming the Watchdog,
// so two would report the same series. Unregister the returned
// Registration before dropping w. It returns an error if the MeterProvider
// refuses an instrument or the callback, or if w is nil.
func ObserveStats(w *watchdog.Watchdog, opts ...Option) (metric.Registration, error) {
	if w == nil {
		return nil, errors.New("otelwatchdog: ObserveStats: nil Watchdog")
	}
	c := newConfig(opts)
	meter := c.mp.Meter(ScopeName)
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		g, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	sessions := gauge(MetricSessions, "{session}", "Windows the watchdog is watching.")
	queued := gauge(MetricQueued, "{event}", "Records waiting for the store; new sessions are refused from 262144 on.")
	oldest, err := meter.Float64ObservableGauge(MetricOldestQueued, metric.WithUnit("s"),
		metric.WithDescription("How long the record queued longest has waited for the store."))
	errs = append(errs, err)
	coalesced := counter(MetricCoalesced, "{event}", "CONTINUE records folded into a later one while the queue was full.")
	hung := gauge(MetricHungAppends, "{call}", "Store Appends past their timeout that have not returned.")
	failing := gauge(MetricFailingActions, "{session}", "Sessions whose action failed and is retried after a backoff.")
	panics := counter(MetricPanics, "{panic}", "Panics recovered from user code (store, hooks, actions, callbacks, clock).")
	abandoned := counter(MetricAbandonedHandlers, "{handler}", "Functions abandoned past their deadline and grace.")
	running := gauge(MetricAbandonedRunning, "{handler}", "Abandoned functions still running.")
	renewals := counter(MetricLeaseRenewals, "{heartbeat}", "Lease heartbeats that renewed the lease.")
	leaseFailures := counter(MetricLeaseFailures, "{heartbeat}", "Lease heartbeats that failed.")
	adopted := counter(MetricAdopted, "{window}", "Windows adopted from owners whose lease expired.")
	disowned := counter(MetricDisowned, "{window}", "Sessions no longer watched because another owner holds their window.")
	watched := gauge(MetricSessionsWatched, "{session}", "Windows being watched whose policy arms the rule in the mode.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := w.Stats()
		o.ObserveInt64(sessions, int64(st.Sessions))
		o.ObserveInt64(queued, int64(st.Queued))
		o.ObserveFloat64(oldest, st.OldestQueued.Seconds())
		o.ObserveInt64(coalesced, st.Coalesced)
		o.ObserveInt64(hung, int64(st.HungAppends))
		o.ObserveInt64(failing, int64(st.FailingActions))
		o.ObserveInt64(panics, st.Panics)
		o.ObserveInt64(abandoned, st.AbandonedHandlers)
		o.ObserveInt64(running, st.AbandonedRunning)
		o.ObserveInt64(renewals, st.LeaseRenewals)
		o.ObserveInt64(leaseFailures, st.LeaseFailures)
		o.ObserveInt64(adopted, st.Adopted)
		o.ObserveInt64(disowned, st.Disowned)
		byRule := w.SessionsByRule()
		for _, b := range builtinRuleModes {
			o.ObserveInt64(watched, int64(byRule[b.key]), b.attrs)
			delete(byRule, b.key)
		}
		for k, n := range byRule { // liveness rules: names the policy declares
			o.ObserveInt64(watched, int64(n), metric.WithAttributes(AttrRule.String(k.Rule), AttrMode.String(string(k.Mode))))
		}
		return nil
	}, sessions, queued, oldest, coalesced, hung, failing, panics, abandoned, running, renewals, leaseFailures, adopted, disowned, watched)
}

// ruleSeries is a series of MetricSessionsWatched: its key in
// Watchdog.SessionsByRule and its attributes.
type ruleSeries struct {
	key   watchdog.RuleMode
	attrs metric.ObserveOption
}

// builtinRuleModes are the series of MetricSessionsWatched observed at
// every collection, 0 included: the built-in rules in each mode.
var builtinRuleModes = func() []ruleSeries {
	var out []ruleSeries
	for _, rule := range []string{"wall_clock", "session_ceiling", "children_wait", "idle"} {
		for _, mode := range []watchdog.Mode{watchdog.ModeAct, watchdog.ModeShadow} {
			out = append(out, ruleSeries{watchdog.RuleMode{Rule: rule, Mode: mode},
				metric.WithAttributeSet(attribute.NewSet(AttrRule.String(rule), AttrMode.String(string(mode))))})
		}
	}
	return out
}()
