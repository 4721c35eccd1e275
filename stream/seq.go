package stream

import (
	"context"
	"fmt"
	"iter"

	"github.com/sessionwatchdog/watchdog"
)

// Seq guards the sequence produce returns, as a call named name with the
// limits l (see the package doc). produce is called with the call's context
// and must stop when it ends: that is how a stall, the cap or ctx's end
// unblocks it (a producer that ignores its context keeps the sequence
// waiting). It opens its stream on that context too, so the wait for the
// stream to open counts toward l.FirstProgress and l.Cap. An error the
// producer yields once the guard ended its context (typically ctx.Err())
// is replaced by the guard's, and ends the sequence. Time the consumer
// spends between two values counts too: consume promptly. progress says
// whether a value is progress (nil: every value without an error is). The
// sequence yields produce's values and errors; if the guard stopped the
// producer (a stall: an error matching ErrStalled; the cap:
// watchdog.ErrDeadlineExceeded; ctx's cause), it then yields that error
// once, with T's zero value. Bad input (a nil produce, a Cap that is not
// positive, an invalid name) yields one error wrapping
// watchdog.ErrInvalidArgument. Each range over the sequence runs its own
// guard, from the range's start.
func Seq[T any](ctx context.Context, name string, produce func(ctx context.Context) iter.Seq2[T, error], l watchdog.CallLimits, progress func(T) bool) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var g guard
		if produce == nil {
			g.refuse(fmt.Errorf("%w: stream %q: nil produce function", watchdog.ErrInvalidArgument, name))
		} else {
			g.start(ctx, name, l, nil) // the call's context ends with the guard: the producer's stop
		}
		if g.ctx == nil {
			var zero T
			yield(zero, g.finish())
			return
		}
		for v, err := range produce(g.ctx) {
			if err == nil && (progress == nil || progress(v)) {
				g.chunk()
			}
			if err != nil && g.ctx.Err() != nil {
				// The producer stopped because the guard ended its
				// context: say why (a stall, the cap, ctx's end).
				if gerr := g.finish(); gerr != nil {
					err = gerr
				}
				var zero T
				yield(zero, err)
				return
			}
			if !yield(v, err) {
				g.finish()
				return
			}
		}
		if err := g.finish(); err != nil {
			var zero T
			yield(zero, err)
		}
	}
}
