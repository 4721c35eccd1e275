package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// BenchmarkCall is the cost of one call under a deadline, in a session,
// against the bare function in the same run, and of one Progress report
// inside a call (per chunk or step):
//
//	go test -run '^$' -bench 'BenchmarkCall|BenchmarkProgress' -benchmem .
func BenchmarkCall(b *testing.B) {
	fn := func(context.Context) error { return nil }
	b.Run("bare", func(b *testing.B) {
		ctx := benchSession(b).Context()
		b.ReportAllocs()
		for range b.N {
			_ = fn(ctx)
		}
	})
	b.Run("Call", func(b *testing.B) {
		ctx := benchSession(b).Context()
		b.ReportAllocs()
		for range b.N {
			_ = watchdog.Call(ctx, "tool", time.Minute, fn)
		}
	})
	b.Run("CallWith", func(b *testing.B) {
		ctx := benchSession(b).Context()
		l := watchdog.CallLimits{Cap: time.Minute, Idle: 10 * time.Second}
		b.ReportAllocs()
		for range b.N {
			_ = callWith(ctx, "tool", l, fn)
		}
	})
}

func BenchmarkProgress(b *testing.B) {
	run := func(b *testing.B, ctx context.Context) {
		_ = callWith(ctx, "tool", watchdog.CallLimits{Cap: time.Hour, Idle: time.Minute}, func(ctx context.Context) error {
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				watchdog.Progress(ctx, uint64(i+1))
			}
			return nil
		})
	}
	b.Run("session", func(b *testing.B) { run(b, benchSession(b).Context()) })
	b.Run("no-session", func(b *testing.B) { run(b, context.Background()) })
}
