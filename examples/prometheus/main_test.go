package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/otlptranslator"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
	"github.com/sessionwatchdog/watchdog/otelwatchdog"
	"github.com/sessionwatchdog/watchdog/watchdogtest"
)

// scrape GETs url and parses the text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// series renders the gauge and counter series of the families whose name
// starts with watchdog_ as sorted `name{labels} value` lines, without the
// exporter's otel_scope_* labels (checked to name otelwatchdog's scope).
// It skips the histogram watchdog_scheduler_tick_lateness_seconds: the
// scheduler reports its lateness from a goroutine of its own, after its
// passes, which Check does not wait for.
func series(t *testing.T, families map[string]*dto.MetricFamily) []string {
	t.Helper()
	var out []string
	for name, f := range families {
		if !strings.HasPrefix(name, "watchdog_") || f.GetType() == dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "otel_scope_name":
					assert.Equal(t, otelwatchdog.ScopeName, l.GetValue(), name)
				case "otel_scope_version", "otel_scope_schema_url":
				default:
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			default:
				t.Fatalf("%s is a %v", name, f.GetType())
			}
			id := name
			if len(labels) > 0 {
				id += "{" + strings.Join(labels, ",") + "}"
			}
			out = append(out, fmt.Sprintf("%s %g", id, v))
		}
	}
	sort.Strings(out)
	return out
}

// Two sessions on a mock clock, one fired by its wall clock and one still
// watched (its idle rule in shadow mode), plus a handler overrun: a scrape
// of /metrics over HTTP shows otelwatchdog's instruments under their own
// names with the exporter's default options (no _milliseconds, no double
// _total), with these exact values.
func TestAScrapeShowsTheWatchdogsMetricsUnderTheirOwnNames(t *testing.T) {
	ctx := context.Background()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	w, err := NewMonitored(reg, watchdog.WithClock(mock))
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Close(ctx)) }()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	_, err = w.Start(ctx, "short", mock.Now(), watchdog.Policy{WallClock: time.Minute})
	require.NoError(t, err)
	long, err := w.Start(ctx, "long", mock.Now(), watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Minute,
		RuleModes: map[string]watchdog.Mode{"idle": watchdog.ModeShadow}})
	require.NoError(t, err)
	require.NoError(t, watchdog.Call(long.Context(), "web_search", 30*time.Second, func(context.Context) error { return nil }))
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- watchdog.Call(long.Context(), "fetch", 5*time.Second, func(ctx context.Context) error {
			defer watchdog.Step(ctx, "http_get")()
			close(started)
			<-ctx.Done() // outlives its budget
			return context.Cause(ctx)
		})
	}()
	testwait.For(t, started, "the handler to start")
	require.NoError(t, watchdogtest.Advance(ctx, mock, 2*time.Minute, w.Watchdog))
	require.ErrorIs(t, testwait.For(t, done, "the request's result"), watchdog.ErrDeadlineExceeded)
	require.NoError(t, w.Check(ctx))

	families := scrape(t, srv.URL+"/metrics")
	assert.Equal(t, []string{
		`watchdog_adopted_windows_total 0`,
		`watchdog_coalesced_events_total 0`,
		`watchdog_disowned_windows_total 0`,
		`watchdog_events_total{event_kind="runtime.handler.deadline_exceeded",reason="handler_deadline_exceeded",rule="handler_deadline"} 1`,
		`watchdog_events_total{event_kind="runtime.watchdog.cancel",reason="wall_clock_exceeded",rule="wall_clock",verdict="HARD_STOP"} 1`,
		`watchdog_events_total{event_kind="runtime.watchdog.decision",mode="act",reason="wall_clock_exceeded",rule="wall_clock",verdict="HARD_STOP"} 1`,
		`watchdog_events_total{event_kind="runtime.watchdog.start"} 2`,
		`watchdog_failing_actions 0`,
		`watchdog_handler_abandoned_running 0`,
		`watchdog_handler_abandoned_total 0`,
		`watchdog_handler_deadline_exceeded_total{dying_span="http_get",handler="fetch",layer="handler"} 1`,
		`watchdog_handler_deadline_remaining_seconds{handler="fetch",layer="handler"} 5`,
		`watchdog_handler_deadline_remaining_seconds{handler="web_search",layer="handler"} 30`,
		`watchdog_hung_appends 0`,
		`watchdog_lease_failures_total 0`,
		`watchdog_lease_renewals_total 0`,
		`watchdog_oldest_queued_seconds 0`,
		`watchdog_panics_total 0`,
		`watchdog_queued_events 0`,
		`watchdog_sessions 1`,
		`watchdog_sessions_watched{mode="act",rule="children_wait"} 0`,
		`watchdog_sessions_watched{mode="act",rule="idle"} 0`,
		`watchdog_sessions_watched{mode="act",rule="session_ceiling"} 0`,
		`watchdog_sessions_watched{mode="act",rule="wall_clock"} 1`,
		`watchdog_sessions_watched{mode="shadow",rule="children_wait"} 0`,
		`watchdog_sessions_watched{mode="shadow",rule="idle"} 1`,
		`watchdog_sessions_watched{mode="shadow",rule="session_ceiling"} 0`,
		`watchdog_sessions_watched{mode="shadow",rule="wall_clock"} 0`,
	}, series(t, families))
	if h, ok := families["watchdog_scheduler_tick_lateness_seconds"]; ok { // exported as _bucket, _sum and _count
		assert.Equal(t, dto.MetricType_HISTOGRAM, h.GetType())
	}
}

// familyNames are the names of the families that start with watchdog_.
func familyNames(families map[string]*dto.MetricFamily) []string {
	var out []string
	for name := range families {
		if strings.HasPrefix(name, "watchdog_") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// The instrument names already end with their unit and _total, so every
// translation strategy of the exporter, with or without suffixes, shows the
// same names as the default one: nothing to configure, nothing deprecated.
func TestEveryTranslationStrategyShowsTheSameNames(t *testing.T) {
	ctx := context.Background()
	names := func(opts ...otelprom.Option) []string {
		reg := prometheus.NewRegistry()
		exporter, err := otelprom.New(append(opts, otelprom.WithRegisterer(reg))...)
		require.NoError(t, err)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
		defer func() { require.NoError(t, mp.Shutdown(ctx)) }()
		obs, err := otelwatchdog.New(otelwatchdog.WithMeterProvider(mp))
		require.NoError(t, err)
		w := watchdog.New(watchdog.WithClock(clock.NewMock()), watchdog.WithObserver(obs))
		defer func() { require.NoError(t, w.Close(ctx)) }()
		stats, err := otelwatchdog.ObserveStats(w, otelwatchdog.WithMeterProvider(mp))
		require.NoError(t, err)
		defer func() { require.NoError(t, stats.Unregister()) }()
		// One measurement of each instrument of New.
		_, end := obs.OnHandler(ctx, watchdog.LayerHandler, "h", time.Second)
		end(watchdog.ErrDeadlineExceeded, &watchdog.Event{Kind: watchdog.KindHandlerDeadline})
		obs.OnSchedulerTick(time.Millisecond)
		obs.OnEvent(watchdog.Event{Kind: watchdog.KindStart})
		families, err := reg.Gather()
		require.NoError(t, err)
		byName := make(map[string]*dto.MetricFamily)
		for _, f := range families {
			byName[f.GetName()] = f
		}
		return familyNames(byName)
	}
	want := names()
	require.Contains(t, want, "watchdog_scheduler_tick_lateness_seconds")
	require.Contains(t, want, "watchdog_handler_deadline_remaining_seconds")
	require.Len(t, want, 18)
	for _, strategy := range []otlptranslator.TranslationStrategyOption{
		otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
		otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation,
	} {
		assert.Equal(t, want, names(otelprom.WithTranslationStrategy(strategy)), string(strategy))
	}
}
