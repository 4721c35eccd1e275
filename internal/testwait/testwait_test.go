package testwait

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine that called it (a panic here, runtime.Goexit in testing's).
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestForReturnsTheValueSentOrZeroOnceClosed(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := For(t, ch, "a value"); got != 7 {
		t.Fatalf("For = %d, want 7", got)
	}
	close(ch)
	if got := For(t, ch, "the close"); got != 0 {
		t.Fatalf("For = %d after close, want 0", got)
	}
	if _, open := Recv(t, ch, "the close"); open {
		t.Fatal("Recv says a closed channel is open")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go wg.Done()
	Group(t, &wg, "the group")
	For(t, Returns(func() {}), "a call")
	if got := Call(t, func() int { return 3 }, "a call's result"); got != 3 {
		t.Fatalf("Call = %d, want 3", got)
	}
}

func TestAWaitThatNeverEndsFailsNamingWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		within(r, make(chan struct{}), "the never-closed channel", time.Millisecond)
	}()
	if want := "waited 1ms for the never-closed channel"; r.msg != want {
		t.Fatalf("Fatalf(%q), want %q", r.msg, want)
	}
}
