package watchdog

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog/internal/slogzap"
)

// Clock is the time source of a Watchdog: the two methods it calls. Both
// clock.New() and *clock.Mock from github.com/benbjohnson/clock satisfy it.
// To adapt another fake (clockwork, quartz, the maintained fork), implement
// both methods; AfterFunc may return nil, in which case the Watchdog never
// stops the timer and relies on its own generation checks, so a late or
// duplicate callback is harmless. The Watchdog never uses a clock's tickers,
// timer channels, Sleep or WithDeadline.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) *clock.Timer
}

// Default retry backoff for events whose Append failed.
const (
	defaultRetryMin = 100 * time.Millisecond
	defaultRetryMax = 30 * time.Second
)

// Option configures a Watchdog's collaborators. Options are applied in order;
// a nil argument keeps the default.
type Option func(*config)

// configOf applies opts, in order, over the defaults (the real clock).
func configOf(opts []Option) config {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.clock == nil {
		c.clock = clock.New()
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if c.faults = (&userFaults{log: c.log}); reflect.TypeOf(c.clock) != realClockType {
		c.clock = &guardedClock{c: c.clock, uf: c.faults} // a Clock of the user's: a panic in it crashes nothing
	}
	return c
}

type config struct {
	faults   *userFaults // the panics recovered from user code, logged
	store    EventStore
	clock    Clock
	log      *zap.Logger
	retryMin time.Duration
	retryMax time.Duration
	action   func(ctx context.Context, s *Session, v *VerdictError) error
	obs      Observer
	idPrefix string
	leaseTTL time.Duration
	adopt    bool
	ckptEach time.Duration
	calls    int
}

// minCheckpointEvery is the shortest period of WithCheckpoints.
const minCheckpointEvery = 50 * time.Millisecond

func defaultConfig() config {
	return config{retryMin: defaultRetryMin, retryMax: defaultRetryMax}
}

// WithAction sets a pluggable action: what the Watchdog does when a rule in
// act mode fires, instead of only cancelling the session's context.
// Default: none; the scheduler then cancels the session's context with the
// verdict as its cause, at the instant of the decision.
//
// The action runs off the scheduler, never under a lock, on a goroutine of
// its session's: one action (or Wait callback) of a session at a time, in
// order, while other sessions' run beside it. It should respect ctx
// (cancelled by Close). Before it runs, the verdict is derived again at the action's own
// instant; if fresh evidence arrived in between, the decision is recorded as
// superseded and the action does not run. It must not call Check or Close.
// When it returns nil the window ends: a cancel event linked to the decision
// is recorded and the session's context is cancelled with v. An error (or a
// panic) is logged, recorded as an action_failed event, and the rule is
// looked at again after a backoff: the settle interval, doubling with each
// consecutive failure, at most 10 minutes. The session is not cancelled
// behind the action's back.
func WithAction(a func(ctx context.Context, s *Session, v *VerdictError) error) Option {
	return func(c *config) { c.action = a }
}

// WithEventIDPrefix makes event ids prefix followed by a counter, so that a
// test driving the Watchdog from a seed gets a byte-identical log every run.
// Default: the host's name, the process id and 8 random hex digits,
// "build7-4242-1a2b3c4d-", which names the owner of the Watchdog's windows
// in a live list (see the live package). Never give two
// Watchdogs that share a store the same prefix: stores treat a repeated id
// as a retry and would drop the second event. A prefix longer than 256
// bytes, not valid UTF-8 or holding a NUL byte cannot make ids a store
// keeps: it is ignored (the default is used) and logged at error level.
func WithEventIDPrefix(prefix string) Option {
	return func(c *config) { c.idPrefix = prefix }
}

// WithObserver sets the hooks for metrics and traces (see Observer and the
// otelwatchdog module). Default: none.
func WithObserver(o Observer) Option {
	return func(c *config) { c.obs = o }
}

// WithStore sets the EventStore that records every event. Default: a new
// MemoryStore private to the Watchdog (see Watchdog.Store).
func WithStore(s EventStore) Option {
	return func(c *config) {
		if s != nil {
			c.store = s
		}
	}
}

// WithClock sets the time source. Default: clock.New(), the real clock, which
// also runs unchanged inside a testing/synctest bubble.
func WithClock(cl Clock) Option {
	return func(c *config) {
		if cl != nil {
			c.clock = cl
		}
	}
}

// WithLogger sets the logger. Default: zap.NewNop(). The Watchdog logs with
// typed fields and never while holding a lock.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithCallRecords makes the Watchdog record each handler that returns (a
// Begin, Call or Within with LayerHandler: a tool call) as a
// KindCallCompleted event, up to n per session window; later ones in the
// window are not recorded (the count of those that were is the bound a
// reader sees). The event says the handler's name, how long it ran
// (measure_seconds) against its cap (limit_seconds), its last progress,
// and how it ended (reason "ok", "error" with the error's text, or the
// deadline's reason). A handler abandoned at its deadline has its own
// events instead. Default, and for n <= 0: off.
func WithCallRecords(n int) Option {
	return func(c *config) { c.calls = max(n, 0) }
}

// WithSlog makes the Watchdog log through l, a *slog.Logger, instead of a
// *zap.Logger (see WithLogger; the last of the two given wins). zap's debug,
// info, warn and error levels map to slog's, and typed fields to
// attributes. A nil l keeps the default: nothing is logged. A handler that
// panics loses the record, not the Watchdog.
func WithSlog(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = slogzap.New(l)
		}
	}
}

// WithRetryBackoff sets the backoff between attempts to record an event whose
// Append failed: min after the first failure, doubling up to max. Values <= 0
// keep the defaults (100 ms and 30 s); max below min is
// raised to min. Retries run on the Watchdog's clock.
func WithRetryBackoff(min, max time.Duration) Option {
	return func(c *config) {
		if min > 0 {
			c.retryMin = min
		}
		if max > 0 {
			c.retryMax = max
		}
		if c.retryMax < c.retryMin {
			c.retryMax = c.retryMin
		}
	}
}
