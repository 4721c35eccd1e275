// A context derived from context.Background() (context.WithTimeout and
// the like) drops the caller's deadline and the verdict all the same: it
// is reported where the function has a context, not where only a watched
// session is in scope (a context of its own, derived on purpose).
package derived

import (
	"context"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

func tool(ctx context.Context, name string) error { return nil }

func withContext(ctx context.Context) {
	tctx, cancel := context.WithTimeout(context.Background(), time.Second) // want `context.Background\(\) where the function has a context`
	defer cancel()
	_ = tool(tctx, "its own timeout only")
	dctx, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	_ = tool(dctx, "the caller's deadline, and one of its own")
}

func withSession(s *watchdog.Session) {
	tctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = tool(tctx, "bounded by its own timeout")
}
