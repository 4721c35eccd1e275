package slogzap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// Entries reach the slog handler with their level, message and typed
// fields, fields given by With included; levels below the handler's are
// not built.
func TestEntriesReachTheSlogHandlerWithLevelsAndFields(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Debug("not shown", zap.String("k", "v"))
	l.With(zap.String("owner", "o1")).Warn("watchdog: store slow", zap.String("session_id", "a"),
		zap.Int("window", 2), zap.Duration("backoff", 1500*time.Millisecond), zap.Error(errors.New("boom")))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &rec), b.String())
	assert.Equal(t, "WARN", rec["level"])
	assert.Equal(t, "watchdog: store slow", rec["msg"])
	assert.Equal(t, "o1", rec["owner"])
	assert.Equal(t, "a", rec["session_id"])
	assert.EqualValues(t, 2, rec["window"])
	assert.EqualValues(t, 1500*time.Millisecond, rec["backoff"])
	assert.Equal(t, "boom", rec["error"])
	assert.Equal(t, 1, bytes.Count(b.Bytes(), []byte("\n")), "one record: the debug entry was dropped")
}

// A nil logger logs nothing, and a handler that panics costs the entry,
// not the caller.
func TestNilLoggerAndPanickingHandler(t *testing.T) {
	New(nil).Error("dropped")
	h := &panicHandler{}
	assert.NotPanics(t, func() { New(slog.New(h)).Error("lost") })
	assert.Equal(t, 1, h.calls)
}

type panicHandler struct{ calls int }

func (*panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *panicHandler) Handle(context.Context, slog.Record) error {
	h.calls++
	panic("handler bug")
}
func (h *panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *panicHandler) WithGroup(string) slog.Handler      { return h }
