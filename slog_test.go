package watchdog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// With WithSlog the Watchdog logs through a *slog.Logger: here the
// warning that a resume keeps an open window's recorded policy, with its
// level and typed attributes. The file store takes one too.
func TestWithSlogLogsThroughSlog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var b bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&b, nil))
		store, err := file.Open(t.TempDir()+"/events.jsonl", file.WithSlog(log))
		require.NoError(t, err)
		w1 := watchdog.New(watchdog.WithStore(store), watchdog.WithSlog(log))
		_, err = w1.Start(ctx, "agent", time.Now(), watchdog.Policy{WallClock: time.Hour})
		require.NoError(t, err)
		require.NoError(t, w1.Close(ctx))
		w2 := watchdog.New(watchdog.WithStore(store), watchdog.WithSlog(log))
		_, err = w2.Resume(ctx, "agent", watchdog.Policy{WallClock: time.Minute})
		require.NoError(t, err)
		require.NoError(t, w2.Close(ctx))
		require.NoError(t, store.Close())

		var rec map[string]any
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(b.Bytes()), &rec), b.String())
		assert.Equal(t, "WARN", rec["level"])
		assert.Contains(t, rec["msg"], "recorded policy")
		assert.Equal(t, "agent", rec["session_id"])
		assert.EqualValues(t, 1, rec["window"])
	})
}
