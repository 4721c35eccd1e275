package watchdog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/zap"
)

// DefaultWallClock is the wall-clock budget of a window when
// Policy.WallClock is zero: four hours, the seed's session_wall_clock_seconds
// default.
const DefaultWallClock = 4 * time.Hour

// Policy holds the per-session limits. It is plain data: it marshals to JSON
// with the seed's knob names, a zero field means its documented default, and
// Validate reports bad values. A Policy is passed by value to Start, Resume and
// Run; the Watchdog keeps its own resolved copy.
type Policy struct {
	// WallClock is the budget of one window of the session, measured from
	// the window's start (the session's start for window 1, the resume moment
	// for a window opened after a terminal event). The session fires when
	// now - window start > WallClock. Zero means DefaultWallClock; negative
	// is invalid. JSON: session_wall_clock_seconds, in seconds (fractions
	// allowed).
	WallClock time.Duration
}

type policyJSON struct {
	WallClockSeconds float64 `json:"session_wall_clock_seconds"`
}

// MarshalJSON encodes p with the seed's knob names; durations are seconds.
func (p Policy) MarshalJSON() ([]byte, error) {
	return json.Marshal(policyJSON{WallClockSeconds: p.WallClock.Seconds()})
}

// UnmarshalJSON decodes the seed's knob names. Unknown fields and durations
// that overflow time.Duration are errors naming the field.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var j policyJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	d, err := secondsToDuration("session_wall_clock_seconds", j.WallClockSeconds)
	if err != nil {
		return err
	}
	*p = Policy{WallClock: d}
	return nil
}

func secondsToDuration(field string, s float64) (time.Duration, error) {
	ns := s * float64(time.Second)
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, fmt.Errorf("%w: %s = %v overflows a duration", ErrInvalidPolicy, field, s)
	}
	return time.Duration(ns), nil
}

// Validate reports the first invalid field of p, wrapped in ErrInvalidPolicy
// and named by its JSON knob. A zero field is valid: it means its default.
func (p Policy) Validate() error {
	if p.WallClock < 0 {
		return fmt.Errorf("%w: session_wall_clock_seconds = %v must not be negative", ErrInvalidPolicy, p.WallClock.Seconds())
	}
	return nil
}

// withDefaults returns p with every zero field replaced by its default.
func (p Policy) withDefaults() Policy {
	if p.WallClock == 0 {
		p.WallClock = DefaultWallClock
	}
	return p
}

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
	DefaultRetryMin = 100 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
)

// Option configures a Watchdog's collaborators. Options are applied in order;
// a nil argument keeps the default.
type Option func(*config)

type config struct {
	store    EventStore
	clock    Clock
	log      *zap.Logger
	retryMin time.Duration
	retryMax time.Duration
}

func defaultConfig() config {
	return config{retryMin: DefaultRetryMin, retryMax: DefaultRetryMax}
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

// WithRetryBackoff sets the backoff between attempts to record an event whose
// Append failed: min after the first failure, doubling up to max. Values <= 0
// keep the defaults (DefaultRetryMin, DefaultRetryMax); max below min is
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
