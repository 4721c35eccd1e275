package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// notifier sends sd_notify(3) messages to the service manager over the
// unixgram socket named by NOTIFY_SOCKET. A nil *notifier sends nothing:
// the process was not started by systemd with Type=notify or
// NotifyAccess=. Not safe for concurrent use.
type notifier struct {
	conn net.Conn
}

// dialNotify connects to $NOTIFY_SOCKET: a path, or an abstract socket
// written @name. It returns nil and no error when NOTIFY_SOCKET is unset,
// and an error naming the value for any other form (systemd's vsock:
// addresses are not supported here).
func dialNotify(ctx context.Context) (*notifier, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: want a socket path or an abstract socket (@name)", addr)
	}
	var d net.Dialer // Go reads a leading @ as Linux's abstract namespace
	conn, err := d.DialContext(ctx, "unixgram", addr)
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: %w", addr, err)
	}
	return &notifier{conn: conn}, nil
}

// notify sends one message, such as "READY=1" or "WATCHDOG=1". A send that
// cannot complete within a second (the manager's queue is full) fails
// rather than blocking the caller.
func (n *notifier) notify(state string) error {
	if n == nil {
		return nil
	}
	if err := n.conn.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	if _, err := n.conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return nil
}

// Close closes the socket. A nil *notifier has nothing to close.
func (n *notifier) Close() error {
	if n == nil {
		return nil
	}
	return n.conn.Close()
}

// pingInterval returns how often to send WATCHDOG=1: half of
// $WATCHDOG_USEC, as sd_watchdog_enabled(3) recommends. It returns 0 when
// the service manager expects no pings from this process: WATCHDOG_USEC is
// unset, or WATCHDOG_PID names another process. A value that is not a
// positive number of microseconds is an error naming it.
func pingInterval() (time.Duration, error) {
	usec := os.Getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0, nil
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, nil
	}
	v, err := strconv.ParseUint(usec, 10, 64)
	if err != nil || v == 0 || v > math.MaxInt64/uint64(time.Microsecond) {
		return 0, fmt.Errorf("WATCHDOG_USEC=%q: want a positive number of microseconds", usec)
	}
	return time.Duration(v) * time.Microsecond / 2, nil
}
