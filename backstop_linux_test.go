//go:build linux

package watchdog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// armedFor reads the time left on b's timerfd: zero when disarmed.
func armedFor(t *testing.T, b *backstop) time.Duration {
	t.Helper()
	var spec unix.ItimerSpec
	var err error
	require.NoError(t, b.conn.Control(func(fd uintptr) { err = unix.TimerfdGettime(int(fd), &spec) }))
	require.NoError(t, err)
	return time.Duration(spec.Value.Nano())
}

// Armed for now, the backstop wakes its reader goroutine (a read of the
// timerfd through the network poller) once its delay has passed.
func TestBackstopArmedForNowWakesItsReader(t *testing.T) {
	b := newBackstop()
	require.NotNil(t, b, "timerfd_create failed")
	defer b.close()
	b.arm(0)
	select {
	case <-b.C:
	case <-time.After(10 * time.Second): // a failure guard, not a wait for the library
		t.Fatal("backstop armed for now did not wake in 10s")
	}
}

// Arming replaces the previous setting, backstopDelay after the timer's
// instant, and stop disarms: the scheduler relies on both.
func TestBackstopArmingReplacesAndStopDisarms(t *testing.T) {
	b := newBackstop()
	require.NotNil(t, b)
	defer b.close()
	require.Zero(t, armedFor(t, b), "a new backstop is disarmed")
	b.arm(0)
	b.arm(time.Hour) // replaces the instant one
	left := armedFor(t, b)
	require.Greater(t, left, time.Hour-time.Minute)
	require.LessOrEqual(t, left, time.Hour+backstopDelay)
	b.stop()
	require.Zero(t, armedFor(t, b))
	b.arm(time.Duration(1<<63 - 1)) // saturates instead of overflowing
	require.Greater(t, armedFor(t, b), 100*365*24*time.Hour)
}

// Close ends the backstop's reader goroutine before it returns. Arming a
// closed backstop is harmless: it never reaches another file that reused
// its descriptor number.
func TestCloseEndsTheBackstopGoroutineAndItsDescriptor(t *testing.T) {
	w := New()
	require.NotNil(t, w.bs, "a real-clock Watchdog on Linux has a backstop")
	select {
	case <-w.bs.done:
		t.Fatal("the backstop's reader ended before Close")
	default:
	}
	require.NoError(t, w.Close(context.Background()))
	select {
	case <-w.bs.done:
	default:
		t.Fatal("Close returned with the backstop's reader still running")
	}
	other := newBackstop() // likely the same descriptor number
	require.NotNil(t, other)
	defer other.close()
	w.bs.arm(time.Hour)
	require.Zero(t, armedFor(t, other), "a closed backstop armed another file")
}

// Inside a testing/synctest bubble the runtime's clock is virtual: a
// Watchdog there has no backstop (a goroutine blocked on a timerfd would
// keep the bubble from going idle, and the test would hang).
func TestNoBackstopInsideASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		require.Nil(t, w.bs)
		s, err := w.Start(context.Background(), "s", time.Now(), Policy{WallClock: time.Second})
		require.NoError(t, err)
		<-s.Context().Done() // fake time advances: the bubble is idle
		require.NoError(t, w.Close(context.Background()))
	})
}
