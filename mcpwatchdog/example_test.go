package mcpwatchdog_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/mcpwatchdog"
)

// A client whose tool calls run under per-tool limits: the tool that never
// answers nor reports progress is cancelled at its 100 ms idle limit.
func Example() {
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "tools", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "search"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-ctx.Done() // stalls
		return nil, nil, ctx.Err()
	})
	ct, st := mcp.NewInMemoryTransports()
	ss, _ := server.Connect(ctx, st, nil)
	defer ss.Close()

	g := mcpwatchdog.New(mcpwatchdog.Budgets{
		Default: watchdog.CallLimits{Cap: time.Minute, Idle: 10 * time.Second},
		Tools:   map[string]watchdog.CallLimits{"search": {Cap: 30 * time.Second, Idle: 100 * time.Millisecond}},
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: g.ProgressHandler(nil)})
	client.AddSendingMiddleware(g.Middleware())
	cs, _ := client.Connect(ctx, ct, nil)
	defer cs.Close()

	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search"})
	var v *watchdog.VerdictError
	if errors.As(err, &v) {
		fmt.Println(v.Name, v.Rule, v.Budget)
	}
	// Output: search handler_idle 100ms
}
