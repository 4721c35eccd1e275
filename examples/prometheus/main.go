// Command prometheus serves a Watchdog's metrics to Prometheus: the
// otelwatchdog adapter records them on an OpenTelemetry MeterProvider whose
// reader is the OpenTelemetry Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus), registered on a
// prometheus.Registry that promhttp serves on /metrics. The exporter runs
// with its default options: otelwatchdog's instrument names are already
// Prometheus names, so no unit or counter suffix is added.
//
// main_test.go runs two sessions on a mock clock, one fired and one still
// watched, scrapes /metrics over HTTP and checks the exact series.
//
// Run the program with: go run . -addr localhost:9464
// then: curl -s localhost:9464/metrics | grep ^watchdog_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/otelwatchdog"
)

// Monitored is a Watchdog whose metrics are registered on a Prometheus
// Registerer. Close it instead of the Watchdog.
type Monitored struct {
	*watchdog.Watchdog
	stats interface{ Unregister() error }
	mp    *sdkmetric.MeterProvider
}

// NewMonitored returns a Watchdog built with opts and observed by
// otelwatchdog, whose instruments (and Stats, through
// otelwatchdog.ObserveStats) reg exposes: serve it with
// promhttp.HandlerFor. It returns an error if reg refuses the exporter
// (for example a second registration on the same Registerer).
func NewMonitored(reg prometheus.Registerer, opts ...watchdog.Option) (*Monitored, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg)) // default translation: names as they are
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := otelwatchdog.New(otelwatchdog.WithMeterProvider(mp))
	if err != nil {
		return nil, errors.Join(err, mp.Shutdown(context.Background()))
	}
	w := watchdog.New(append(opts, watchdog.WithObserver(obs))...)
	stats, err := otelwatchdog.ObserveStats(w, otelwatchdog.WithMeterProvider(mp))
	if err != nil {
		return nil, errors.Join(err, w.Close(context.Background()), mp.Shutdown(context.Background()))
	}
	return &Monitored{Watchdog: w, stats: stats, mp: mp}, nil
}

// Close closes the Watchdog, then stops exporting its metrics.
func (m *Monitored) Close(ctx context.Context) error {
	err := m.Watchdog.Close(ctx)
	return errors.Join(err, m.stats.Unregister(), m.mp.Shutdown(ctx))
}

func main() {
	addr := flag.String("addr", "localhost:9464", "address of the /metrics endpoint")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	reg := prometheus.NewRegistry()
	w, err := NewMonitored(reg)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close(context.Background())

	// One session that runs out of its budget, one that is still watched.
	if _, err := w.Start(ctx, "short", time.Now(), watchdog.Policy{WallClock: 2 * time.Second}); err != nil {
		log.Fatal(err)
	}
	long, err := w.Start(ctx, "long", time.Now(), watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Minute,
		RuleModes: map[string]watchdog.Mode{"idle": watchdog.ModeShadow}})
	if err != nil {
		log.Fatal(err)
	}
	_ = watchdog.Call(long.Context(), "web_search", 30*time.Second, func(context.Context) error { return nil })

	srv := &http.Server{Addr: *addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background()) //watchdog:unbounded ctx has ended: the shutdown waits for the scrapes in progress
	}()
	log.Printf("serving http://%s/metrics (Ctrl-C to stop)", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
