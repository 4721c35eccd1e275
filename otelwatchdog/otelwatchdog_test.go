package otelwatchdog_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/otelwatchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

var t0 = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

// fixture is a Watchdog on a mock clock wired to an SDK MeterProvider with a
// manual reader and a TracerProvider with a span recorder.
type fixture struct {
	ctx    context.Context
	mock   *clock.Mock
	store  *watchdog.MemoryStore
	w      *watchdog.Watchdog
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
	obs    watchdog.Observer
}

func newFixture(t *testing.T, opts ...otelwatchdog.Option) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{
		ctx:    ctx,
		mock:   clock.NewMock(),
		store:  watchdog.NewMemoryStore(),
		reader: sdkmetric.NewManualReader(),
		spans:  tracetest.NewSpanRecorder(),
	}
	f.mock.Set(t0)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(ctx)
		_ = tp.Shutdown(ctx)
	})
	f.mp = mp
	f.tracer = tp.Tracer("test")
	obs, err := otelwatchdog.New(append([]otelwatchdog.Option{
		otelwatchdog.WithMeterProvider(mp), otelwatchdog.WithTracerProvider(tp)}, opts...)...)
	require.NoError(t, err)
	f.obs = obs
	f.w = watchdog.New(watchdog.WithClock(f.mock), watchdog.WithStore(f.store), watchdog.WithObserver(obs))
	t.Cleanup(func() { _ = f.w.Close(ctx) })
	return f
}

func (f *fixture) advance(t *testing.T, d time.Duration) {
	t.Helper()
	require.NoError(t, watchdogtest.Advance(f.ctx, f.mock, d, f.w))
}

// collect reads every metric of the adapter's scope, by name.
func (f *fixture) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, f.reader.Collect(f.ctx, &rm))
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelwatchdog.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumPoints maps each data point's attribute set to its value.
func sumPoints(t *testing.T, m metricdata.Metrics) map[attribute.Distinct]metricdata.DataPoint[int64] {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	require.True(t, sum.IsMonotonic, m.Name)
	out := make(map[attribute.Distinct]metricdata.DataPoint[int64])
	for _, dp := range sum.DataPoints {
		out[distinct(dp.Attributes)] = dp
	}
	return out
}

func set(kvs ...attribute.KeyValue) attribute.Distinct {
	s := attribute.NewSet(kvs...)
	return s.Equivalent()
}

func distinct(s attribute.Set) attribute.Distinct { return s.Equivalent() }

// eventCounts maps each watchdog_events_total attribute set to its count.
func eventCounts(t *testing.T, ms map[string]metricdata.Metrics) map[attribute.Distinct]int64 {
	t.Helper()
	out := make(map[attribute.Distinct]int64)
	for k, dp := range sumPoints(t, ms[otelwatchdog.MetricEvents]) {
		out[k] = dp.Value
	}
	return out
}

func lateness(t *testing.T, ms map[string]metricdata.Metrics) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := ms[otelwatchdog.MetricSchedulerTickLateness]
	require.True(t, ok, "no %s", otelwatchdog.MetricSchedulerTickLateness)
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%T", m.Data)
	require.Len(t, h.DataPoints, 1)
	assert.Equal(t, "s", m.Unit)
	return h.DataPoints[0]
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			require.Nil(t, found, "two spans named %q", name)
			found = s
		}
	}
	require.NotNil(t, found, "no span named %q", name)
	return found
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	out := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out
}

// A handler killed by its deadline and the overrun it causes share one
// trace; the metrics count the overrun by its dying span, the budget left at
// dispatch, the recorded events and the scheduler pass that fired it.
func TestHandlerOverrunMetricsAndTrace(t *testing.T) {
	f := newFixture(t)
	s, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)

	parentCtx, parent := f.tracer.Start(s.Context(), "agent turn")
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watchdog.Call(parentCtx, "web_search", 2*time.Second, func(ctx context.Context) error {
			defer watchdog.Step(ctx, "http_get")()
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	testwait.For(t, started, "the call to start") // the deadline is armed and the step marked
	f.advance(t, 3*time.Second)
	callErr := testwait.For(t, done, "the call's result")
	require.ErrorIs(t, callErr, watchdog.ErrDeadlineExceeded)
	require.NoError(t, f.w.Check(f.ctx)) // the recorder has appended and reported the overrun
	parent.End()

	evs, err := f.store.Load(f.ctx, "s1")
	require.NoError(t, err)
	require.Len(t, evs, 2)
	overrun := evs[1]
	require.Equal(t, watchdog.KindHandlerDeadline, overrun.Kind)
	require.Equal(t, "http_get", overrun.DyingSpan)

	ms := f.collect(t)

	// The budget left at dispatch.
	g, ok := ms[otelwatchdog.MetricHandlerDeadlineRemaining].Data.(metricdata.Gauge[float64])
	require.True(t, ok)
	require.Len(t, g.DataPoints, 1)
	assert.Equal(t, 2.0, g.DataPoints[0].Value, "seconds")
	assert.Equal(t, set(otelwatchdog.AttrHandler.String("web_search"), otelwatchdog.AttrLayer.String("handler")),
		distinct(g.DataPoints[0].Attributes))
	assert.Equal(t, "s", ms[otelwatchdog.MetricHandlerDeadlineRemaining].Unit)

	// One overrun, by its dying span; its exemplar points at the handler span.
	exceeded := sumPoints(t, ms[otelwatchdog.MetricHandlerDeadlineExceeded])
	require.Len(t, exceeded, 1)
	dp, ok := exceeded[set(otelwatchdog.AttrHandler.String("web_search"), otelwatchdog.AttrLayer.String("handler"),
		otelwatchdog.AttrDyingSpan.String("http_get"))]
	require.True(t, ok, "attributes: %v", exceeded)
	assert.Equal(t, int64(1), dp.Value)

	// The recorded events, by kind and reason.
	assert.Equal(t, map[attribute.Distinct]int64{
		set(otelwatchdog.AttrEventKind.String(watchdog.KindStart)): 1,
		set(otelwatchdog.AttrEventKind.String(watchdog.KindHandlerDeadline),
			otelwatchdog.AttrReason.String("handler_deadline_exceeded"),
			otelwatchdog.AttrRule.String("handler_deadline")): 1,
	}, eventCounts(t, ms))

	// The scheduler passes (the deadline's, and any re-examination of the
	// session it caused) were exactly on time: the mock clock stops at
	// every due instant.
	h := lateness(t, ms)
	assert.GreaterOrEqual(t, h.Count, uint64(1))
	assert.Equal(t, 0.0, h.Sum)

	// The trace: the handler span is a child of the caller's span, ended
	// with an Error status and the overrun as a span event.
	ended := f.spans.Ended()
	require.Len(t, ended, 2)
	hs := spanNamed(t, ended, "handler web_search")
	assert.Equal(t, parent.SpanContext().TraceID(), hs.SpanContext().TraceID())
	assert.Equal(t, parent.SpanContext().SpanID(), hs.Parent().SpanID())
	assert.Equal(t, codes.Error, hs.Status().Code)
	assert.Equal(t, callErr.Error(), hs.Status().Description)
	sa := attrs(hs.Attributes())
	assert.Equal(t, "s1", sa[otelwatchdog.SpanAttrSessionID].AsString())
	assert.Equal(t, int64(1), sa[otelwatchdog.SpanAttrWindow].AsInt64())
	assert.Equal(t, "handler", sa[otelwatchdog.SpanAttrLayer].AsString())
	assert.Equal(t, "web_search", sa[otelwatchdog.SpanAttrHandler].AsString())
	assert.Equal(t, 2000.0, sa[otelwatchdog.SpanAttrBudgetMS].AsFloat64())
	assert.True(t, sa[otelwatchdog.SpanAttrDeadlineExceeded].AsBool())
	assert.Equal(t, "http_get", sa[otelwatchdog.SpanAttrDyingSpan].AsString())

	require.Len(t, hs.Events(), 1)
	ev := hs.Events()[0]
	assert.Equal(t, watchdog.KindHandlerDeadline, ev.Name)
	ea := attrs(ev.Attributes)
	assert.Equal(t, overrun.ID, ea[otelwatchdog.SpanAttrEventID].AsString())
	assert.Equal(t, "http_get", ea[otelwatchdog.SpanAttrDyingSpan].AsString())
	assert.Equal(t, 2000.0, ea[otelwatchdog.SpanAttrBudgetMS].AsFloat64())
	assert.Equal(t, 2000.0, ea[otelwatchdog.SpanAttrElapsedMS].AsFloat64())
	assert.Equal(t, "handler_deadline_exceeded", ea[otelwatchdog.SpanAttrReason].AsString())
	assert.Equal(t, "handler_deadline", ea[otelwatchdog.SpanAttrRule].AsString())
	assert.Equal(t, "2026-05-23T09:00:02Z", ea[otelwatchdog.SpanAttrOccurredAt].AsString())

	// The overrun counter's exemplar carries the handler span: the metric
	// links to the same trace.
	require.Len(t, dp.Exemplars, 1)
	assert.Equal(t, hs.SpanContext().TraceID(), trace.TraceID(dp.Exemplars[0].TraceID))
	assert.Equal(t, hs.SpanContext().SpanID(), trace.SpanID(dp.Exemplars[0].SpanID))
	// So does the gauge's.
	require.Len(t, g.DataPoints[0].Exemplars, 1)
	assert.Equal(t, hs.SpanContext().SpanID(), trace.SpanID(g.DataPoints[0].Exemplars[0].SpanID))
}

// A handler that ignores its context is abandoned at deadline + grace; the
// overrun is counted once and the abandonment is an event of its own.
func TestAbandonedHandler(t *testing.T) {
	f := newFixture(t)
	s, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)

	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watchdog.Call(s.Context(), "shell", time.Second, func(ctx context.Context) error {
			defer watchdog.Step(ctx, "exec")()
			close(started)
			<-release // ignores its context
			return nil
		})
	}()
	testwait.For(t, started, "the call to start")
	f.advance(t, time.Second+5*time.Second)
	require.ErrorIs(t, testwait.For(t, done, "the call's result"), watchdog.ErrDeadlineExceeded)
	require.NoError(t, f.w.Check(f.ctx))

	ms := f.collect(t)
	exceeded := sumPoints(t, ms[otelwatchdog.MetricHandlerDeadlineExceeded])
	assert.Equal(t, int64(1), exceeded[set(otelwatchdog.AttrHandler.String("shell"),
		otelwatchdog.AttrLayer.String("handler"), otelwatchdog.AttrDyingSpan.String("exec"))].Value)
	assert.Len(t, exceeded, 1)
	ec := eventCounts(t, ms)
	assert.Equal(t, int64(1), ec[set(otelwatchdog.AttrEventKind.String(watchdog.KindHandlerDeadline),
		otelwatchdog.AttrReason.String("handler_deadline_exceeded"), otelwatchdog.AttrRule.String("handler_deadline"))])
	assert.Equal(t, int64(1), ec[set(otelwatchdog.AttrEventKind.String(watchdog.KindHandlerAbandoned),
		otelwatchdog.AttrReason.String("handler_deadline_exceeded"))])
	// At least two passes: the deadline, then the end of the grace period.
	h := lateness(t, ms)
	assert.GreaterOrEqual(t, h.Count, uint64(2))
	assert.Equal(t, 0.0, h.Sum)

	ended := f.spans.Ended()
	require.Len(t, ended, 1)
	assert.Equal(t, codes.Error, ended[0].Status().Code)
	require.Len(t, ended[0].Events(), 1)
	assert.Equal(t, "exec", attrs(ended[0].Events()[0].Attributes)[otelwatchdog.SpanAttrDyingSpan].AsString())
}

// The wall clock's decision and cancel are counted with their reason.
func TestWallClockCancelCounters(t *testing.T) {
	f := newFixture(t)
	s, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: 10 * time.Second})
	require.NoError(t, err)
	f.advance(t, 11*time.Second)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)

	ms := f.collect(t)
	kind := otelwatchdog.AttrEventKind.String
	reason := otelwatchdog.AttrReason.String("wall_clock_exceeded")
	rule := otelwatchdog.AttrRule.String("wall_clock")
	hardStop := otelwatchdog.AttrVerdict.String("HARD_STOP")
	act := otelwatchdog.AttrMode.String(string(watchdog.ModeAct))
	assert.Equal(t, map[attribute.Distinct]int64{
		set(kind(watchdog.KindStart)):                                 1,
		set(kind(watchdog.KindDecision), reason, rule, hardStop, act): 1,
		set(kind(watchdog.KindCancel), reason, rule, hardStop):        1,
	}, eventCounts(t, ms))
	h := lateness(t, ms)
	assert.GreaterOrEqual(t, h.Count, uint64(1))
	assert.Equal(t, 0.0, h.Sum)
	assert.Equal(t, []float64{0, 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, h.Bounds,
		"seconds, from 100 µs to 10 s")
	// No deadline layer ran: no gauge, no overrun, no span.
	assert.NotContains(t, ms, otelwatchdog.MetricHandlerDeadlineRemaining)
	assert.NotContains(t, ms, otelwatchdog.MetricHandlerDeadlineExceeded)
	assert.Empty(t, f.spans.Ended())
}

// An operator's stop (Session.StopBy) is counted apart from a completion:
// same event kind, its own reason.
func TestAnOperatorsStopIsCountedApartFromACompletion(t *testing.T) {
	f := newFixture(t)
	s1, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	s2, err := f.w.Start(f.ctx, "s2", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s1.Stop())
	require.NoError(t, s2.StopBy("alice@ops", "runaway tool loop"))
	f.advance(t, time.Second)

	kind := otelwatchdog.AttrEventKind.String
	counts := eventCounts(t, f.collect(t))
	assert.Equal(t, int64(1), counts[set(kind(watchdog.KindStop), otelwatchdog.AttrReason.String(watchdog.StopCompleted))])
	assert.Equal(t, int64(1), counts[set(kind(watchdog.KindStop), otelwatchdog.AttrReason.String(watchdog.StopRequested))])
}

// Nested layers nest their spans; a layer that returns in time records its
// budget but no overrun, and its span ends with an unset status (or Error
// when it fails).
func TestNestedLayersInTime(t *testing.T) {
	f := newFixture(t)
	s, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)

	errBoom := errors.New("boom")
	err = watchdog.Within(s.Context(), watchdog.LayerPhase, "plan", time.Minute, func(ctx context.Context) error {
		require.NoError(t, watchdog.Call(ctx, "read_file", 500*time.Millisecond, func(context.Context) error { return nil }))
		return watchdog.Call(ctx, "write_file", 1500*time.Millisecond, func(context.Context) error { return errBoom })
	})
	require.ErrorIs(t, err, errBoom)
	require.NoError(t, f.w.Check(f.ctx))

	ms := f.collect(t)
	g, ok := ms[otelwatchdog.MetricHandlerDeadlineRemaining].Data.(metricdata.Gauge[float64])
	require.True(t, ok)
	got := make(map[attribute.Distinct]float64)
	for _, dp := range g.DataPoints {
		got[distinct(dp.Attributes)] = dp.Value
	}
	handler, layer := otelwatchdog.AttrHandler.String, otelwatchdog.AttrLayer.String
	assert.Equal(t, map[attribute.Distinct]float64{
		set(handler("plan"), layer("phase")):         60,
		set(handler("read_file"), layer("handler")):  0.5,
		set(handler("write_file"), layer("handler")): 1.5,
	}, got)
	assert.NotContains(t, ms, otelwatchdog.MetricHandlerDeadlineExceeded)

	ended := f.spans.Ended()
	require.Len(t, ended, 3)
	phase := spanNamed(t, ended, "phase plan")
	read := spanNamed(t, ended, "handler read_file")
	write := spanNamed(t, ended, "handler write_file")
	assert.False(t, phase.Parent().IsValid(), "the phase span is a root: the session context has no span")
	for _, hs := range []sdktrace.ReadOnlySpan{read, write} {
		assert.Equal(t, phase.SpanContext().TraceID(), hs.SpanContext().TraceID())
		assert.Equal(t, phase.SpanContext().SpanID(), hs.Parent().SpanID())
		assert.Empty(t, hs.Events())
	}
	assert.Equal(t, codes.Unset, read.Status().Code)
	assert.Equal(t, codes.Error, write.Status().Code)
	assert.Equal(t, "boom", write.Status().Description)
	assert.Equal(t, codes.Error, phase.Status().Code)
}

// The Observer is safe for concurrent use: many handlers on many sessions
// (run with -race).
func TestConcurrentHandlers(t *testing.T) {
	f := newFixture(t)
	const sessions, calls = 8, 50
	errs := make(chan error, sessions)
	for i := range sessions {
		s, err := f.w.Start(f.ctx, "s"+string(rune('a'+i)), t0, watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		go func() {
			for range calls {
				if err := watchdog.Call(s.Context(), "tool", time.Second, func(context.Context) error { return nil }); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range sessions {
		require.NoError(t, testwait.For(t, errs, "a session's result"))
	}
	require.NoError(t, f.w.Check(f.ctx))
	assert.Len(t, f.spans.Ended(), sessions*calls)
	ec := eventCounts(t, f.collect(t))
	assert.Equal(t, int64(sessions), ec[set(otelwatchdog.AttrEventKind.String(watchdog.KindStart))])
}

// Lateness is recorded in fractional seconds into the configured buckets.
func TestLatenessIsRecordedInSecondsIntoTheConfiguredBuckets(t *testing.T) {
	f := newFixture(t, otelwatchdog.WithLatenessBuckets(0.001, 0.01))
	f.obs.OnSchedulerTick(2500 * time.Microsecond)
	f.obs.OnSchedulerTick(20 * time.Millisecond)
	h := lateness(t, f.collect(t))
	assert.Equal(t, []float64{0.001, 0.01}, h.Bounds)
	assert.Equal(t, []uint64{0, 1, 1}, h.BucketCounts)
	assert.Equal(t, uint64(2), h.Count)
	assert.InDelta(t, 0.0225, h.Sum, 1e-12)
	maxV, ok := h.Max.Value()
	assert.True(t, ok)
	assert.Equal(t, 0.02, maxV)
}

// Without options, New uses the global providers (no-op by default) and its
// hooks work; a nil option is ignored.
func TestNewDefaults(t *testing.T) {
	obs, err := otelwatchdog.New(nil, otelwatchdog.WithMeterProvider(nil), otelwatchdog.WithTracerProvider(nil))
	require.NoError(t, err)
	require.NotNil(t, obs.OnEvent)
	require.NotNil(t, obs.OnHandler)
	require.NotNil(t, obs.OnSchedulerTick)
	ctx, end := obs.OnHandler(context.Background(), watchdog.LayerHandler, "h", time.Second)
	require.NotNil(t, ctx)
	require.NotNil(t, end)
	end(watchdog.ErrDeadlineExceeded, &watchdog.Event{Kind: watchdog.KindHandlerDeadline})
	obs.OnSchedulerTick(time.Millisecond)
	obs.OnEvent(watchdog.Event{Kind: watchdog.KindStart})
}

// gaugeValue is the value of an attribute-less gauge or int64 sum.
func gaugeValue(t *testing.T, m metricdata.Metrics) int64 {
	t.Helper()
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		require.Len(t, d.DataPoints, 1, m.Name)
		return d.DataPoints[0].Value
	case metricdata.Gauge[float64]: // seconds, compared whole
		require.Len(t, d.DataPoints, 1, m.Name)
		return int64(d.DataPoints[0].Value)
	case metricdata.Sum[int64]:
		require.True(t, d.IsMonotonic, m.Name)
		require.Len(t, d.DataPoints, 1, m.Name)
		return d.DataPoints[0].Value
	}
	t.Fatalf("%s is a %T", m.Name, m.Data)
	return 0
}

// ObserveStats exports the Watchdog's Stats at each collection: the
// sessions watched and an abandoned handler still running show; the rest
// is zero; after Unregister nothing is observed.
func TestObserveStatsExportsTheWatchdogsState(t *testing.T) {
	f := newFixture(t)
	reg, err := otelwatchdog.ObserveStats(f.w, otelwatchdog.WithMeterProvider(f.mp))
	require.NoError(t, err)
	s, err := f.w.Start(f.ctx, "s1", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	_, err = f.w.Start(f.ctx, "s2", t0, watchdog.Policy{WallClock: time.Hour})
	require.NoError(t, err)
	release, started, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	defer close(release)
	go func() {
		done <- watchdog.Call(s.Context(), "shell", time.Second, func(ctx context.Context) error {
			close(started)
			<-release // ignores its context
			return nil
		})
	}()
	testwait.For(t, started, "the call to start")
	f.advance(t, 6*time.Second)
	require.ErrorIs(t, testwait.For(t, done, "the call's result"), watchdog.ErrDeadlineExceeded)

	ms := f.collect(t)
	want := map[string]int64{
		otelwatchdog.MetricSessions: 2, otelwatchdog.MetricQueued: 0, otelwatchdog.MetricOldestQueued: 0, otelwatchdog.MetricCoalesced: 0,
		otelwatchdog.MetricHungAppends: 0, otelwatchdog.MetricFailingActions: 0, otelwatchdog.MetricPanics: 0,
		otelwatchdog.MetricAbandonedHandlers: 1, otelwatchdog.MetricAbandonedRunning: 1,
		otelwatchdog.MetricLeaseRenewals: 0, otelwatchdog.MetricLeaseFailures: 0, otelwatchdog.MetricAdopted: 0, otelwatchdog.MetricDisowned: 0,
	}
	for name, v := range want {
		require.Contains(t, ms, name)
		assert.Equal(t, v, gaugeValue(t, ms[name]), name)
	}
	require.NoError(t, reg.Unregister())
	after := f.collect(t)
	for name := range want {
		assert.NotContains(t, after, name)
	}
	assert.NotContains(t, after, otelwatchdog.MetricSessionsWatched)
	_, err = otelwatchdog.ObserveStats(nil)
	require.ErrorContains(t, err, "nil Watchdog")
}

// watchedSeries maps each rule/mode of MetricSessionsWatched to its value.
func watchedSeries(t *testing.T, ms map[string]metricdata.Metrics) map[[2]string]int64 {
	t.Helper()
	m, ok := ms[otelwatchdog.MetricSessionsWatched]
	require.True(t, ok, "no %s", otelwatchdog.MetricSessionsWatched)
	assert.Equal(t, "{session}", m.Unit)
	g, ok := m.Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%T", m.Data)
	out := make(map[[2]string]int64)
	for _, dp := range g.DataPoints {
		rule, _ := dp.Attributes.Value(otelwatchdog.AttrRule)
		mode, _ := dp.Attributes.Value(otelwatchdog.AttrMode)
		require.Equal(t, 2, dp.Attributes.Len(), "rule and mode only")
		out[[2]string{rule.AsString(), mode.AsString()}] = dp.Value
	}
	return out
}

// ObserveStats exports the windows watched by rule and mode: every built-in
// rule in both modes (0 included), a liveness rule while a window declares
// it; a window leaves the count when it ends, not on a shadow decision.
func TestObserveStatsExportsTheSessionsWatchedByRuleAndMode(t *testing.T) {
	f := newFixture(t)
	reg, err := otelwatchdog.ObserveStats(f.w, otelwatchdog.WithMeterProvider(f.mp))
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	_, err = f.w.Start(f.ctx, "acting", t0, watchdog.Policy{WallClock: time.Second, IdleWindow: time.Minute})
	require.NoError(t, err)
	_, err = f.w.Start(f.ctx, "advised", t0, watchdog.Policy{WallClock: time.Second, Mode: watchdog.ModeShadow})
	require.NoError(t, err)
	live, err := f.w.Start(f.ctx, "heartbeat", t0, watchdog.Policy{WallClock: time.Hour, LivenessRules: []string{"heartbeat"},
		RuleModes: map[string]watchdog.Mode{"heartbeat": watchdog.ModeShadow}})
	require.NoError(t, err)

	zero := map[[2]string]int64{}
	for _, rule := range []string{"wall_clock", "session_ceiling", "children_wait", "idle"} {
		zero[[2]string{rule, "act"}], zero[[2]string{rule, "shadow"}] = 0, 0
	}
	with := func(kv map[[2]string]int64) map[[2]string]int64 {
		out := maps.Clone(zero)
		maps.Copy(out, kv)
		return out
	}
	assert.Equal(t, with(map[[2]string]int64{
		{"wall_clock", "act"}: 2, {"wall_clock", "shadow"}: 1, {"idle", "act"}: 1, {"heartbeat", "shadow"}: 1,
	}), watchedSeries(t, f.collect(t)))

	require.NoError(t, live.Stop())
	f.advance(t, 2*time.Second) // "acting" is cancelled; "advised" only gets a shadow decision
	assert.Equal(t, with(map[[2]string]int64{{"wall_clock", "shadow"}: 1}), watchedSeries(t, f.collect(t)))
}
