//go:build linux

package watchdog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The backstop's wake-up comes through the network poller, without any
// runtime timer: armed for now, it wakes its reader at once, plus its delay.
func TestBackstopWakesItsReaderThroughThePoller(t *testing.T) {
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

// A stopped backstop does not wake; one re-armed later than before wakes at
// the later instant only (re-arming replaces, as the scheduler relies on).
func TestStoppedBackstopStaysQuiet(t *testing.T) {
	b := newBackstop()
	require.NotNil(t, b)
	defer b.close()
	b.arm(time.Hour)
	b.stop()
	b.arm(time.Hour) // replaces: nothing due for an hour
	select {
	case <-b.C:
		t.Fatal("a backstop armed an hour ahead woke")
	default:
	}
}

// Close ends the backstop's reader goroutine before it returns, and arming
// a closed backstop is harmless (its descriptor is never reused by mistake).
func TestCloseEndsTheBackstopGoroutine(t *testing.T) {
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
	w.bs.arm(0)
	w.bs.stop()
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
