//go:build unix

package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// fakeSystemd is the service manager's end of NOTIFY_SOCKET: a unixgram
// socket the test reads datagrams from, one at a time.
type fakeSystemd struct {
	conn *net.UnixConn
	addr string
}

// newFakeSystemd listens on a socket in a fresh directory and points
// NOTIFY_SOCKET, WATCHDOG_USEC (2 s: pings every second) and WATCHDOG_PID
// at it. The directory comes from os.MkdirTemp, not t.TempDir, whose path
// holds the test's name and can pass the 108 bytes a socket path may have.
func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdnotify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", addr)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	return &fakeSystemd{conn: conn, addr: addr}
}

// next returns the next datagram. The deadline only guards against a hang
// of a broken build: every datagram the test reads was sent before it asks.
func (f *fakeSystemd) next(t *testing.T) string {
	t.Helper()
	if err := f.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := f.conn.Read(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return string(buf[:n])
}

// expectNothingSent proves that nothing was sent since the last datagram
// read: it sends a marker of its own, which queues behind anything sent
// before it, and reads it back first.
func (f *fakeSystemd) expectNothingSent(t *testing.T) {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(context.Background(), "unixgram", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("MARK")); err != nil {
		t.Fatal(err)
	}
	if got := f.next(t); got != "MARK" {
		t.Fatalf("received %q, want nothing sent", got)
	}
}

// armedClock is a mock clock that reports each AfterFunc keepAlive arms,
// so the test moves time only once keepAlive waits for it.
type armedClock struct {
	*clock.Mock
	armed chan time.Duration
}

func newArmedClock() armedClock {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	return armedClock{mock, make(chan time.Duration, 64)}
}

func (c armedClock) AfterFunc(d time.Duration, f func()) *clock.Timer {
	t := c.Mock.AfterFunc(d, f)
	c.armed <- d
	return t
}

// expectArmed waits until keepAlive armed a timer of d.
func (c armedClock) expectArmed(t *testing.T, d time.Duration, what string) {
	t.Helper()
	if got := testwait.For(t, c.armed, "keepAlive to arm a timer"); got != d {
		t.Fatalf("keepAlive armed %v, want %v (%s)", got, d, what)
	}
}

// start runs keepAlive as main does, with the interval from WATCHDOG_USEC,
// on clk; the Watchdog has its own mock clock.
func start(t *testing.T, ctx context.Context, w *watchdog.Watchdog, clk armedClock, missed func(error)) (<-chan error, time.Duration) {
	t.Helper()
	n, err := dialNotify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	interval, err := pingInterval()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- keepAlive(ctx, w, clk, n, interval, interval/2, missed) }()
	return done, interval
}

// While Check answers, keepAlive sends READY=1 and then WATCHDOG=1 once per
// half of WATCHDOG_USEC, each after a probe; it stops when its context ends.
func TestKeepAliveSendsReadyThenAPingEveryHalfWatchdogUsecWhileCheckAnswers(t *testing.T) {
	sd := newFakeSystemd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watchdog.New(watchdog.WithClock(clock.NewMock()))
	defer w.Close(context.Background())
	clk := newArmedClock()
	done, interval := start(t, ctx, w, clk, nil)
	if interval != time.Second {
		t.Fatalf("ping interval %v, want 1 s (half of WATCHDOG_USEC)", interval)
	}

	if got := sd.next(t); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	for i := 0; i < 3; i++ {
		clk.expectArmed(t, interval, "the next ping")
		sd.expectNothingSent(t) // no ping before the interval
		clk.Add(interval)
		clk.expectArmed(t, interval/2, "the probe's deadline")
		if got := sd.next(t); got != "WATCHDOG=1" {
			t.Fatalf("ping %d: got %q, want WATCHDOG=1", i+1, got)
		}
	}
	clk.expectArmed(t, interval, "the next ping")
	cancel()
	if err := testwait.For(t, done, "keepAlive to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("keepAlive returned %v, want context.Canceled", err)
	}
	sd.expectNothingSent(t)
}

// Once the Watchdog is closed, the next probe fails with ErrClosed:
// keepAlive sends no ping and returns, so systemd restarts the process
// after WatchdogSec unless it exits first.
func TestPingsStopForGoodOnceTheWatchdogIsClosed(t *testing.T) {
	sd := newFakeSystemd(t)
	ctx := context.Background()
	w := watchdog.New(watchdog.WithClock(clock.NewMock()))
	clk := newArmedClock()
	done, interval := start(t, ctx, w, clk, nil)

	if got := sd.next(t); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	clk.expectArmed(t, interval, "the first ping")
	clk.Add(interval)
	if got := sd.next(t); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1", got)
	}
	clk.expectArmed(t, interval/2, "the probe's deadline")
	clk.expectArmed(t, interval, "the second ping")

	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Add(interval)
	if err := testwait.For(t, done, "keepAlive to return"); !errors.Is(err, watchdog.ErrClosed) {
		t.Fatalf("keepAlive returned %v, want ErrClosed", err)
	}
	sd.expectNothingSent(t)
}

// hangingStore is a MemoryStore whose Append blocks until release is
// closed: the Watchdog's recorder is stuck, and Check cannot answer.
type hangingStore struct {
	*watchdog.MemoryStore
	release chan struct{}
}

func (s hangingStore) Append(ctx context.Context, events ...watchdog.Event) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.MemoryStore.Append(ctx, events...)
}

// While Check does not answer within the probe's deadline (here, a store
// whose Append hangs), the ping is withheld and the miss reported; once
// Check answers again, the pings resume.
func TestPingIsWithheldWhileCheckDoesNotAnswer(t *testing.T) {
	sd := newFakeSystemd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wclock := clock.NewMock()
	wclock.Set(time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC))
	store := hangingStore{watchdog.NewMemoryStore(), make(chan struct{})}
	w := watchdog.New(watchdog.WithClock(wclock), watchdog.WithStore(store))
	defer w.Close(context.Background())
	if _, err := w.Start(ctx, "s", wclock.Now(), watchdog.Policy{}); err != nil { // its start event hangs in Append
		t.Fatal(err)
	}
	clk := newArmedClock()
	missed := make(chan error, 4)
	done, interval := start(t, ctx, w, clk, func(err error) { missed <- err })

	if got := sd.next(t); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	clk.expectArmed(t, interval, "the first ping")
	clk.Add(interval)
	clk.expectArmed(t, interval/2, "the probe's deadline")
	clk.Add(interval / 2) // the probe times out
	if err := testwait.For(t, missed, "the missed-notification report"); err == nil || !strings.Contains(err.Error(), "did not answer within 500ms") {
		t.Fatalf("the missed probe reported %v, want that Check did not answer in time", err)
	}
	clk.expectArmed(t, interval, "the second ping")
	sd.expectNothingSent(t)

	close(store.release) // the store answers again
	clk.Add(interval)
	clk.expectArmed(t, interval/2, "the probe's deadline")
	if got := sd.next(t); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1 once Check answers", got)
	}
	cancel()
	if err := testwait.For(t, done, "keepAlive to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("keepAlive returned %v, want context.Canceled", err)
	}
}

// pingInterval follows sd_watchdog_enabled(3): half of WATCHDOG_USEC, none
// when it is unset or WATCHDOG_PID names another process, and an error
// naming a value that is not a positive number of microseconds.
func TestPingIntervalIsHalfOfWatchdogUsecForThisProcessOnly(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		bad       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 15 * time.Second, false},
		{"30000000", self, 15 * time.Second, false},
		{"30000000", strconv.Itoa(os.Getpid() + 1), 0, false},
		{"0", "", 0, true},
		{"-5", "", 0, true},
		{"30s", "", 0, true},
		{"99999999999999999999", "", 0, true},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		got, err := pingInterval()
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: got %v, %v; want %v, error %v", c.usec, c.pid, got, err, c.want, c.bad)
		}
	}
}

// Without NOTIFY_SOCKET there is no service manager: the notifier is nil
// and sends nothing. A NOTIFY_SOCKET of another form is an error naming it.
func TestNotifySocketUnsetMeansNoManagerAndOtherFormsAreErrors(t *testing.T) {
	ctx := context.Background()
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := dialNotify(ctx)
	if n != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil", n, err)
	}
	if err := n.notify("READY=1"); err != nil {
		t.Fatalf("a nil notifier: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1234")
	if _, err := dialNotify(ctx); err == nil {
		t.Fatal("a vsock: address was accepted")
	}
}

// keepAlive refuses an interval or a probe timeout that is not positive.
func TestKeepAliveRejectsANonPositiveInterval(t *testing.T) {
	w := watchdog.New(watchdog.WithClock(clock.NewMock()))
	defer w.Close(context.Background())
	for _, d := range [][2]time.Duration{{0, time.Second}, {time.Second, 0}, {-time.Second, time.Second}} {
		if err := keepAlive(context.Background(), w, clock.NewMock(), nil, d[0], d[1], nil); err == nil {
			t.Errorf("interval %v, probe timeout %v: accepted", d[0], d[1])
		}
	}
}
