package mcpwatchdog_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/mcpwatchdog"
)

// deafTransport is a client transport whose peer never takes a
// notifications/cancelled message: writing one blocks until its context
// ends, as on a degraded connection.
type deafTransport struct{ mcp.Transport }

func (d deafTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return deafConn{c}, nil
}

type deafConn struct{ mcp.Connection }

func (c deafConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "notifications/cancelled" {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.Connection.Write(ctx, msg)
}

// connectDeaf is connect over a deafTransport.
func connectDeaf(t *testing.T, g *mcpwatchdog.Guard) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := toolServer(make(chan string, 4)).Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: g.ProgressHandler(nil)})
	client.AddSendingMiddleware(g.Middleware())
	cs, err := client.Connect(ctx, deafTransport{ct}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

const blockingCancelNotify = "blockingcancelnotify=1"

// By default the SDK sends the cancel notification in the background: a
// peer that never takes it does not hold the caller past the verdict.
func TestTheCancelNotificationDoesNotHoldTheCallerByDefault(t *testing.T) {
	if strings.Contains(os.Getenv("MCPGODEBUG"), blockingCancelNotify) {
		t.Skip("MCPGODEBUG sets the SDK's blocking mode")
	}
	synctest.Test(t, func(t *testing.T) {
		w, s, store := watched(t, watchdog.Policy{})
		cs := connectDeaf(t, mcpwatchdog.New(budgets))
		begin := time.Now()
		_, err := cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "stalls"})
		assert.Equal(t, "handler_idle", verdictOf(t, err).Rule)
		assert.Equal(t, 300*time.Millisecond, time.Since(begin))
		require.NoError(t, s.Stop())
		assert.Zero(t, w.Stats().AbandonedHandlers)
		assert.Empty(t, ofKind(closeAndLoad(t, w, store), watchdog.KindHandlerAbandoned))
	})
}

// With MCPGODEBUG=blockingcancelnotify=1 the SDK holds a cancelled call
// until its cancel notification is delivered, up to 5 s. A handler grace
// shorter than that abandons the call at the end of the grace (recorded as
// runtime.handler.abandoned); a longer one lets the call return when the
// SDK gives up. Either way the caller gets the verdict. The SDK reads
// MCPGODEBUG once, at init, so the test runs again in a process that has
// it set.
func TestABlockingCancelNotificationHoldsTheCallerUpToItsTimeout(t *testing.T) {
	if !strings.Contains(os.Getenv("MCPGODEBUG"), blockingCancelNotify) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "MCPGODEBUG="+blockingCancelNotify)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: "+t.Name(), "%s", out)
		return
	}
	t.Run("a grace shorter than the SDK's timeout abandons the call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, s, store := watched(t, watchdog.Policy{HandlerGrace: time.Second})
			cs := connectDeaf(t, mcpwatchdog.New(budgets))
			begin := time.Now()
			_, err := cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "stalls"})
			assert.Equal(t, "handler_idle", verdictOf(t, err).Rule)
			assert.Equal(t, 300*time.Millisecond+time.Second, time.Since(begin), "the idle limit, then the grace")
			require.NoError(t, s.Stop())
			assert.Equal(t, int64(1), w.Stats().AbandonedHandlers)
			ab := ofKind(closeAndLoad(t, w, store), watchdog.KindHandlerAbandoned)
			require.Len(t, ab, 1)
			assert.Equal(t, "stalls", ab[0].Handler)
		})
	})
	t.Run("a grace longer than the SDK's timeout returns when the SDK gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, s, store := watched(t, watchdog.Policy{HandlerGrace: 6 * time.Second})
			cs := connectDeaf(t, mcpwatchdog.New(budgets))
			begin := time.Now()
			_, err := cs.CallTool(s.Context(), &mcp.CallToolParams{Name: "stalls"})
			assert.Equal(t, "handler_idle", verdictOf(t, err).Rule)
			assert.Equal(t, 300*time.Millisecond+5*time.Second, time.Since(begin), "the idle limit, then the SDK's 5 s")
			require.NoError(t, s.Stop())
			assert.Zero(t, w.Stats().AbandonedHandlers)
			assert.Empty(t, ofKind(closeAndLoad(t, w, store), watchdog.KindHandlerAbandoned))
		})
	})
}
