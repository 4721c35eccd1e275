// Package slogzap lets the library, which logs through *zap.Logger, log to
// a *slog.Logger instead: a zapcore.Core that hands each entry to the
// slog.Handler, with zap's levels and typed fields mapped to slog's.
package slogzap

import (
	"context"
	"io"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a *zap.Logger that writes through l's handler; a nil l gives
// zap.NewNop().
func New(l *slog.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&core{h: l.Handler()}, zap.ErrorOutput(zapcore.AddSync(io.Discard)))
}

type core struct{ h slog.Handler }

func (c *core) Enabled(lvl zapcore.Level) bool {
	return c.h.Enabled(context.Background(), Level(lvl))
}

func (c *core) With(fs []zapcore.Field) zapcore.Core {
	if len(fs) == 0 {
		return c
	}
	return &core{h: c.h.WithAttrs(Attrs(fs))}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write hands the entry to the handler. A handler that panics loses the
// entry, not the caller: the library logs from goroutines that must go on.
func (c *core) Write(e zapcore.Entry, fs []zapcore.Field) (err error) {
	defer func() {
		if recover() != nil {
			err = errPanicked
		}
	}()
	r := slog.NewRecord(e.Time, Level(e.Level), e.Message, 0)
	r.AddAttrs(Attrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c *core) Sync() error { return nil }

type panicked struct{}

func (panicked) Error() string { return "slogzap: the slog handler panicked" }

var errPanicked error = panicked{}

// Level maps a zap level to slog's: debug, info, warn, and error for error
// and above.
func Level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// Attrs turns zap fields into slog attributes, in order, with the values
// zap's encoders give them (durations stay durations, errors become their
// text under the field's key).
func Attrs(fs []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	out := make([]slog.Attr, 0, len(fs))
	for _, f := range fs {
		f.AddTo(enc)
		if v, ok := enc.Fields[f.Key]; ok {
			out = append(out, slog.Any(f.Key, v))
			delete(enc.Fields, f.Key)
		}
	}
	return out
}
