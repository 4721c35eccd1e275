package relay

import (
	"context"
	"testing"

	"github.com/sessionwatchdog/watchdog/internal/testwait"
)

// Values pushed before and while the reader reads arrive in order, Push
// never waits for the reader, and the channel closes when the context ends.
func TestValuesArriveInOrderAndTheChannelClosesWithTheContext(t *testing.T) {
	r := New[int]()
	for i := range 1000 { // nobody reads yet: Push must not block
		r.Push(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	for want := range 1000 {
		if got := testwait.For(t, r.C(), "value from the relay"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
	}
	r.Push(1000)
	if got := testwait.For(t, r.C(), "the value pushed last"); got != 1000 {
		t.Fatalf("got %d, want 1000", got)
	}
	cancel()
	testwait.For(t, done, "Run to return once its context ended")
	if _, ok := testwait.Recv(t, r.C(), "the relay's channel to close"); ok {
		t.Fatal("the channel is still open after the context ended")
	}
}
