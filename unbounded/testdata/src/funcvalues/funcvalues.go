// Calls through function values (a map of tools, a func-typed parameter,
// field or variable, a function literal called at once) are reported as
// calls of named functions are.
package funcvalues

import (
	"context"

	"github.com/sessionwatchdog/watchdog"
)

// tools is how agent code calls its tools: through a map of functions.
type tools map[string]func(context.Context, string) (string, error)

type agent struct {
	search func(context.Context, string) error
}

type ctxAlias = context.Context

func tool(ctx context.Context, name string) error { return nil }

func withContext(ctx context.Context, ts tools, a agent, run func(context.Context, string) error) {
	_, _ = ts["search"](ctx, "bounded")
	_, _ = ts["search"](context.Background(), "q") // want `context.Background\(\) where the function has a context`
	_ = a.search(context.TODO(), "q")              // want `context.TODO\(\) where the function has a context`
	_ = run(context.Background(), "q")             // want `context.Background\(\) where the function has a context`
	f := tool
	_ = f(context.Background(), "q")                                     // want `context.Background\(\) where the function has a context`
	_ = func(context.Context) error { return nil }(context.Background()) // want `context.Background\(\) where the function has a context`
	//watchdog:unbounded the audit log outlives the session
	_ = run(context.Background(), "audit")
	_ = ctxAlias(context.Background())                       // a conversion, not a call
	_ = append([]context.Context{ctx}, context.Background()) // a builtin, not a call that waits
}

func withSession(s *watchdog.Session, ts tools, a *agent) {
	_, _ = ts["search"](s.Context(), "bounded")
	_, _ = ts["search"](context.Background(), "q") // want `context.Background\(\) where a watched session is in scope`
	_ = a.search(context.TODO(), "q")              // want `context.TODO\(\) where a watched session is in scope`
}

func noContext(ts tools) {
	_, _ = ts["search"](context.Background(), "fine: no context to pass here")
}
