package mcpwatchdog_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/mcpwatchdog"
)

type noArgs struct{}

// toolServer is a real MCP server with four tools: one that stalls, one
// that reports advancing progress for 2 s then answers, one that reports
// the same progress forever, and one that reports advancing progress
// forever. cancelled receives the name of each tool whose context the
// client's cancel reached.
func toolServer(cancelled chan<- string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "tools", Version: "v1"}, nil)
	progressing := func(name string, value func(i int) float64, steps int) mcp.ToolHandlerFor[noArgs, any] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; steps == 0 || i <= steps; i++ {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					cancelled <- name
					return nil, nil, ctx.Err()
				}
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: value(i)})
			}
			// The answer 100 ms after the last notification: the client's SDK
			// handles a notification and a response on goroutines of its own,
			// so one sent right after the other may be handled first.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				cancelled <- name
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "stalls"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		cancelled <- "stalls"
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "works"}, progressing("works", func(i int) float64 { return float64(i) / 20 }, 20))
	mcp.AddTool(s, &mcp.Tool{Name: "repeats"}, progressing("repeats", func(int) float64 { return 1 }, 0))
	mcp.AddTool(s, &mcp.Tool{Name: "endless"}, progressing("endless", func(i int) float64 { return float64(i) }, 0))
	return s
}

// connect returns a client session to a fresh toolServer over the SDK's
// in-memory transports, with the Guard wired in.
func connect(t *testing.T, g *mcpwatchdog.Guard, cancelled chan<- string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := toolServer(cancelled).Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: g.ProgressHandler(nil)})
	client.AddSendingMiddleware(g.Middleware())
	cs, err := client.Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

var budgets = mcpwatchdog.Budgets{
	Default: watchdog.CallLimits{Cap: 5 * time.Second, Idle: 300 * time.Millisecond},
	Tools:   map[string]watchdog.CallLimits{"endless": {Cap: time.Second, Idle: 300 * time.Millisecond}},
}

func verdictOf(t *testing.T, err error) *watchdog.VerdictError {
	t.Helper()
	require.ErrorIs(t, err, watchdog.ErrDeadlineExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, err, &v)
	return v
}

// Each scenario runs in a synctest bubble: the SDK's in-memory transport
// and the watchdog's real timers run on the bubble's fake clock.
func TestToolCallsUnderTheGuard(t *testing.T) {
	t.Run("a tool that stalls is cancelled at its idle limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cancelled := make(chan string, 4)
			cs := connect(t, mcpwatchdog.New(budgets), cancelled)
			begin := time.Now()
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "stalls"})
			v := verdictOf(t, err)
			assert.Equal(t, "handler_idle", v.Rule)
			assert.Equal(t, "stalls", v.Name)
			assert.Equal(t, 300*time.Millisecond, time.Since(begin))
			assert.Equal(t, "stalls", <-cancelled, "the server's handler saw the cancel")
		})
	})
	t.Run("a tool whose progress advances runs past its idle limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
			begin := time.Now()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "works"})
			require.NoError(t, err)
			assert.Equal(t, "done", res.Content[0].(*mcp.TextContent).Text)
			assert.Equal(t, 2100*time.Millisecond, time.Since(begin), "20 progress steps of 100 ms, then the answer, under a 300 ms idle limit")
		})
	})
	t.Run("a tool that repeats the same progress is cancelled at its idle limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cancelled := make(chan string, 4)
			cs := connect(t, mcpwatchdog.New(budgets), cancelled)
			begin := time.Now()
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "repeats"})
			v := verdictOf(t, err)
			assert.Equal(t, "handler_idle", v.Rule)
			assert.Equal(t, 100*time.Millisecond+300*time.Millisecond, time.Since(begin), "300 ms after the only value that advanced")
			assert.Equal(t, "repeats", <-cancelled)
		})
	})
	t.Run("a tool that keeps progressing is cancelled at its cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cancelled := make(chan string, 4)
			cs := connect(t, mcpwatchdog.New(budgets), cancelled)
			begin := time.Now()
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "endless"})
			v := verdictOf(t, err)
			assert.Equal(t, "handler_deadline", v.Rule)
			assert.Equal(t, time.Second, time.Since(begin), "its own cap")
			assert.Equal(t, "endless", <-cancelled)
		})
	})
}

// Inside a watched session, a tool's overrun is recorded with the tool's
// name, the rule and its last progress, and the call is tool-call evidence
// on the session.
func TestAToolCallInASessionIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchdog.NewMemoryStore()
		w := watchdog.New(watchdog.WithStore(store))
		s, err := w.Start(context.Background(), "agent", time.Now(), watchdog.Policy{})
		require.NoError(t, err)
		cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
		_, err = cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "repeats"})
		verdictOf(t, err)
		require.NoError(t, s.Stop())
		require.NoError(t, w.Close(context.Background()))
		evs, err := store.Load(context.Background(), "agent")
		require.NoError(t, err)
		var d *watchdog.Event
		for i := range evs {
			if evs[i].Kind == watchdog.KindHandlerDeadline {
				d = &evs[i]
			}
		}
		require.NotNil(t, d)
		assert.Equal(t, "repeats", d.Handler)
		assert.Equal(t, "handler_idle", d.Rule)
		assert.NotZero(t, d.ProgressValue)
		require.NoError(t, cs.Close())
	})
}

// A tool without limits is refused rather than run unbounded.
func TestAToolWithoutLimitsIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := connect(t, mcpwatchdog.New(mcpwatchdog.Budgets{}), make(chan string, 4))
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "works"})
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		require.NoError(t, cs.Close())
	})
}

// A caller's own progress token is matched whatever its JSON round trip
// does to it (a large integer comes back as a float64), and the params of
// a call without one are left as the caller made them.
func TestProgressTokensMatchAndTheCallersParamsStayAsTheyWere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
		params := &mcp.CallToolParams{Name: "works"}
		params.SetProgressToken(1234567)
		_, err := cs.CallTool(context.Background(), params)
		require.NoError(t, err, "the progress under token 1234567 reached the call")

		plain := &mcp.CallToolParams{Name: "works"}
		_, err = cs.CallTool(context.Background(), plain)
		require.NoError(t, err)
		assert.Nil(t, plain.GetProgressToken(), "the caller's params were not written")
		require.NoError(t, cs.Close())
	})
}

// Two calls in flight with the same token both get its progress; the end
// of one does not take it from the other.
func TestCallsThatShareATokenShareItsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := connect(t, mcpwatchdog.New(budgets), make(chan string, 4))
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				p := &mcp.CallToolParams{Name: "works"}
				p.SetProgressToken("shared")
				_, err := cs.CallTool(context.Background(), p)
				errs <- err
			}()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		require.NoError(t, cs.Close())
	})
}
