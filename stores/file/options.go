package file

import (
	"fmt"
	"log/slog"

	"github.com/sessionwatchdog/watchdog/internal/slogzap"
	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog"
)

// SyncPolicy says when a Store calls fsync(2) on its file. The zero value
// is SyncEveryAppend, the safe default. A Store's policy is fixed by Open.
type SyncPolicy int

const (
	// SyncEveryAppend fsyncs the file after every Append, before Append
	// returns: an event whose Append returned nil survives a process crash,
	// a kernel crash and a power loss. It is the default (the zero value).
	SyncEveryAppend SyncPolicy = iota
	// SyncOnClose writes each Append to the file (write(2) only) before
	// Append returns, and fsyncs only in Close. An acknowledged event
	// survives the process being killed (the kernel holds it), but the last
	// events before a kernel crash or power loss may be lost. Appends are
	// one to two orders of magnitude faster; see the README's benchmarks.
	SyncOnClose
)

// String returns the policy's name: "every-append", "on-close", or
// "SyncPolicy(n)" for a value that is neither.
func (p SyncPolicy) String() string {
	switch p {
	case SyncEveryAppend:
		return "every-append"
	case SyncOnClose:
		return "on-close"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Option configures Open. Options apply in order, so the last one of a kind
// wins; a nil Option is ignored. Without options a Store fsyncs on every
// Append and logs nothing.
type Option func(*config)

type config struct {
	sync SyncPolicy
	log  *zap.Logger
	ret  watchdog.Retention
}

// WithSync sets the Store's fsync policy. Default SyncEveryAppend. Open
// refuses a value that is not one of the SyncPolicy constants with an error
// wrapping watchdog.ErrInvalidArgument.
func WithSync(p SyncPolicy) Option {
	return func(c *config) { c.sync = p }
}

// WithLogger sets the logger the Store reports to: Open logs as a warning
// a torn last line it repaired, a file that group or others may write to,
// and (on Unix) a directory that group or others may write to. Default,
// and for a nil l: no logging (zap.NewNop); the repair is also reported by
// Store.TornTail.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithSlog is WithLogger for a *slog.Logger: the Store logs the same
// warnings through l (zap's levels and fields mapped to slog's). A nil l
// means no logging. The last of WithLogger and WithSlog given wins.
func WithSlog(l *slog.Logger) Option {
	return func(c *config) { c.log = slogzap.New(l) }
}

// WithRetention sets what the Store keeps of ended sessions (see
// watchdog.Retention; the package doc, Retention and compaction, says how
// the file follows). Default, the zero Retention: every event, as the file
// has always kept them. Open refuses a Retention with a negative field with
// an error wrapping watchdog.ErrInvalidArgument that names it.
func WithRetention(r watchdog.Retention) Option {
	return func(c *config) { c.ret = r }
}
