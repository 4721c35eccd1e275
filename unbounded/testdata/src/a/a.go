package a

import (
	"context"
	"net"
	"net/http"
	"os/exec"

	"github.com/sessionwatchdog/watchdog"
)

func tool(ctx context.Context, name string) error { return nil }

func noContext() {
	_ = exec.Command("sleep", "1")                  // want `exec.Command: no context ends its process`
	_, _ = http.Get("http://x")                     // want `http.Get has no context`
	_, _ = http.Post("http://x", "text/plain", nil) // want `http.Post has no context`
	_, _ = http.DefaultClient.Get("http://x")       // want `Client.Get has no context`
	_, _ = http.NewRequest("GET", "http://x", nil)  // want `http.NewRequest makes a request without a context`
	_, _ = net.Dial("tcp", "x:1")                   // want `net.Dial has no deadline`
	var dl net.Dialer
	_, _ = dl.Dial("tcp", "x:1")                       // want `Dialer.Dial has no context`
	_ = tool(context.Background(), "fine: no context") // no context to pass here
}

func withContext(ctx context.Context) {
	_ = exec.CommandContext(ctx, "sleep", "1")
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x", nil)
	_, _ = http.DefaultClient.Do(req)
	var d net.Dialer
	_, _ = d.DialContext(ctx, "tcp", "x:1")
	_ = tool(ctx, "bounded")
	_ = tool(context.Background(), "search") // want `context.Background\(\) where the function has a context`
	_ = tool(context.TODO(), "search")       // want `context.TODO\(\) where the function has a context`
	go func() {
		_ = tool(context.Background(), "in a closure") // want `context.Background\(\) where the function has a context`
	}()
	//watchdog:unbounded the cleanup must run after the session ended
	_ = tool(context.Background(), "cleanup")
	_ = exec.Command("true") //watchdog:unbounded it returns at once
	//watchdog:unbounded
	_ = exec.Command("true") // want `a //watchdog:unbounded comment needs a reason`
	//watchdog:unbounded the whole call, over several lines
	_ = tool(
		context.Background(),
		"multi-line",
	)
	//watchdog:unboundedness is another directive
	_ = exec.Command("true") // want `exec.Command: no context ends its process`
}

type ctxAlias = context.Context

func withAlias(ctx ctxAlias) {
	_ = tool(context.TODO(), "alias") // want `context.TODO\(\) where the function has a context`
}

func withSession(s *watchdog.Session) {
	_ = tool(s.Context(), "bounded")
	_ = tool(context.Background(), "search") // want `context.Background\(\) where a watched session is in scope`
}

func startsASession(w *watchdog.Watchdog) {
	_ = tool(context.Background(), "before the session: nothing to pass yet")
	s, _ := w.Start(context.Background(), "agent")          // the session is declared by this statement
	_ = tool(context.TODO(), "model call")                  // want `context.TODO\(\) where a watched session is in scope`
	_, _ = w.Start(context.Background(), "another")         // the library's own calls take the caller's context
	ctx, cancel := context.WithCancel(context.Background()) // a context of its own, derived on purpose
	defer cancel()
	_ = tool(ctx, "bounded by its own context")
	_ = s
}
