package stream_test

import (
	"context"
	"iter"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/stream"
)

// A producer that yields ctx.Err() when its context ends (what most do): a
// consumer that stops at the first error still sees the stall's error, not
// a bare context error.
func TestSeqReplacesTheProducersContextErrorWithTheGuards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		produce := func(ctx context.Context) iter.Seq2[chunk, error] {
			return func(yield func(chunk, error) bool) {
				if !yield(chunk{"tok"}, nil) {
					return
				}
				<-ctx.Done()
				yield(chunk{}, ctx.Err())
			}
		}
		var first error
		for _, err := range stream.Seq(context.Background(), "llm", produce, watchdog.CallLimits{Idle: time.Second, Cap: time.Hour}, isProgress) {
			if err != nil {
				first = err
				break
			}
		}
		require.ErrorIs(t, first, stream.ErrStalled)
	})
}
