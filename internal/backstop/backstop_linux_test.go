//go:build linux

package backstop

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// armedFor reads the time left on b's timerfd: zero when disarmed.
func armedFor(t *testing.T, b *Backstop) time.Duration {
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
	b := New()
	require.NotNil(t, b, "timerfd_create failed")
	defer b.Close()
	b.Arm(0)
	select {
	case <-b.C:
	case <-time.After(10 * time.Second): // a failure guard, not a wait for the library
		t.Fatal("backstop armed for now did not wake in 10s")
	}
}

// Arming replaces the previous setting, backstopDelay after the timer's
// instant, and stop disarms: the scheduler relies on both.
func TestBackstopArmingReplacesAndStopDisarms(t *testing.T) {
	b := New()
	require.NotNil(t, b)
	defer b.Close()
	require.Zero(t, armedFor(t, b), "a new backstop is disarmed")
	b.Arm(0)
	b.Arm(time.Hour) // replaces the instant one
	left := armedFor(t, b)
	require.Greater(t, left, time.Hour-time.Minute)
	require.LessOrEqual(t, left, time.Hour+backstopDelay)
	b.Stop()
	require.Zero(t, armedFor(t, b))
	b.Arm(time.Duration(1<<63 - 1)) // saturates instead of overflowing
	require.Greater(t, armedFor(t, b), 100*365*24*time.Hour)
}

// Close ends the backstop's reader goroutine before it returns. Arming a
// closed backstop is harmless: it never reaches another file that reused
// its descriptor number.
func TestCloseEndsTheReaderAndArmingAfterwardsReachesNoOtherFile(t *testing.T) {
	b := New()
	require.NotNil(t, b, "timerfd_create failed")
	select {
	case <-b.done:
		t.Fatal("the backstop's reader ended before Close")
	default:
	}
	b.Close()
	select {
	case <-b.done:
	default:
		t.Fatal("Close returned with the backstop's reader still running")
	}
	other := New() // likely the same descriptor number
	require.NotNil(t, other)
	defer other.Close()
	b.Arm(time.Hour)
	require.Zero(t, armedFor(t, other), "a closed backstop armed another file")
}

// Inside a testing/synctest bubble the runtime's clock is virtual: New
// returns no backstop (a goroutine blocked on a timerfd would keep the
// bubble from going idle, and a test would hang).
func TestNoBackstopInsideASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		require.Nil(t, New())
	})
}
