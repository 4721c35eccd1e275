// Package testwait bounds the waits of tests. A test that waits for
// something another goroutine does (a channel, a context's end, a
// WaitGroup) waits through it, at most Bound, and fails saying what it
// waited for, instead of hanging until go test's -timeout ends the whole
// package. Inside a testing/synctest bubble a bare wait is fine: the
// bubble reports a deadlock at once.
//
// It imports only the standard library, so that every package's tests can
// use it, the root package's internal ones included.
package testwait

import (
	"sync"
	"testing"
	"time"
)

// Bound is how long a wait lasts before it fails its test: long enough for
// a goroutine on a loaded machine, under the race detector, to do
// something that takes it milliseconds; short enough that a stuck test
// fails in seconds.
const Bound = 10 * time.Second

// For waits for a value from ch, or for ch to close, and returns it (the
// zero value once closed). After Bound it fails t with "waited 10s for
// <what>".
func For[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	v, _ := within(t, ch, what, Bound)
	return v
}

// Recv is For with the receive's second result: false once ch is closed
// (_, open := Recv(t, sub, "Close to close the subscription")).
func Recv[T any](t testing.TB, ch <-chan T, what string) (v T, ok bool) {
	t.Helper()
	return within(t, ch, what, Bound)
}

func within[T any](t testing.TB, ch <-chan T, what string, d time.Duration) (T, bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
		t.Fatalf("waited %v for %s", d, what)
		panic("unreachable: Fatalf ends the goroutine")
	}
}

// Group waits for wg, as For.
func Group(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	For(t, Returns(wg.Wait), what)
}

// Call runs fn on a new goroutine and returns its result, waiting for it
// as For: Call(t, cmd.Wait, "the killed child to exit").
func Call[T any](t testing.TB, fn func() T, what string) T {
	t.Helper()
	res := make(chan T, 1)
	go func() { res <- fn() }()
	return For(t, res, what)
}

// Returns runs fn on a new goroutine and returns a channel closed when it
// returns: For(t, Returns(fn), what) bounds a blocking call (a process's
// Wait, a server's Close). If it never returns, its goroutine leaks once
// the test has failed.
func Returns(fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	return done
}
