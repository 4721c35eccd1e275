package kills

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// Wait records an armed kill once its tree is gone, and only then, and
// stops its grace's timer; a kill whose signal never went out (nothing to
// kill) is not recorded.
func TestWaitRecordsAKillOnceItsTreeIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // the sleeps are the tree's and the claimer's pace, in the bubble's time
		var s Set
		var gone atomic.Bool
		recorded := make(chan string, 2)
		k := s.Add("the kill of a", gone.Load, func() { recorded <- "a" })
		k.Arm()
		grace := time.AfterFunc(time.Hour, func() { t.Error("the grace's end ran") })
		k.SetTimer(grace)
		unarmed := s.Add("the kill of b", func() bool { return true }, func() { recorded <- "b" })
		go func() {
			time.Sleep(20 * time.Millisecond) // the tree ends while Wait polls
			gone.Store(true)
		}()
		go func() { // b's claimer: it found nothing to signal
			time.Sleep(10 * time.Millisecond)
			if unarmed.Claim() {
				unarmed.Done()
			}
		}()
		assert.Empty(t, testwait.Call(t, func() []string { return s.Wait(context.Background()) }, "Wait"))
		assert.Equal(t, "a", testwait.For(t, recorded, "a's record"))
		assert.Empty(t, recorded, "b is not recorded")
		assert.False(t, k.Claim(), "claimed by Wait")
		assert.False(t, grace.Stop(), "Wait stopped the grace's timer")
		assert.Empty(t, s.Wait(context.Background()), "nothing left to wait for")
	})
}

// A kill its claimer (the grace's end) took first is waited for until the
// claimer is done, and not recorded twice.
func TestWaitWaitsForAKillItsClaimerTook(t *testing.T) {
	var s Set
	k := s.Add("the kill of a", func() bool { return true }, func() { t.Error("recorded by Wait too") })
	k.Arm()
	require.True(t, k.Claim())
	waited := make(chan []string, 1)
	go func() { waited <- s.Wait(context.Background()) }()
	select {
	case <-waited:
		t.Fatal("Wait returned before the claimer was done")
	case <-time.After(20 * time.Millisecond):
	}
	k.Done()
	assert.Empty(t, testwait.For(t, waited, "Wait"))
}

// Wait ends with its context and names the kills still in their grace.
func TestWaitNamesTheKillsItAbandons(t *testing.T) {
	var s Set
	s.Add("the kill of a", func() bool { return false }, func() {}).Arm()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.Equal(t, []string{"the kill of a"}, s.Wait(ctx))
	var nilKill *Kill
	assert.True(t, nilKill.Claim())
	nilKill.Arm()
	nilKill.Done()
}
