// Package kills tracks the kills of commands in their grace (see
// watchdog.Command), so that the Watchdog's Close can wait for each
// command's tree to be gone and record the kill, instead of dropping the
// record that the end of the grace would have written.
package kills

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Kill is one command's kill in its grace. Whoever claims it first (the
// end of the grace, or Close once the tree is gone) records it, then calls
// Done.
type Kill struct {
	name    string
	gone    func() bool
	record  func()
	claimed atomic.Bool
	armed   atomic.Bool // the signal went out: Wait may record it
	timer   atomic.Pointer[time.Timer]
	done    chan struct{}
	set     *Set
}

// Claim reports whether the caller is the first to claim k, and so the one
// to record it and call Done. A nil Kill (a command outside any session) is
// always claimed.
func (k *Kill) Claim() bool { return k == nil || k.claimed.CompareAndSwap(false, true) }

// Arm marks k's signal as sent: until then Wait only waits for k's claimer
// (a kill that found nothing to signal is dropped, not recorded). A nil
// Kill: nothing.
func (k *Kill) Arm() {
	if k != nil {
		k.armed.Store(true)
	}
}

// SetTimer gives k the timer of its grace's end, which Wait stops when it
// records k first (so that nothing of the kill outlives Close). A nil Kill:
// nothing.
func (k *Kill) SetTimer(t *time.Timer) {
	if k == nil {
		return
	}
	k.timer.Store(t)
	if k.claimed.Load() && k.armed.Load() {
		t.Stop() // harmless if the grace's end claimed it: it has fired
	}
}

// Done ends the tracking of k, once its claimer has recorded it. A nil
// Kill: nothing.
func (k *Kill) Done() {
	if k == nil {
		return
	}
	k.set.mu.Lock()
	delete(k.set.m, k)
	k.set.mu.Unlock()
	close(k.done)
}

// Set is the kills in their grace of one Watchdog. The zero Set is ready
// to use; its methods are safe for concurrent use.
type Set struct {
	mu sync.Mutex
	m  map[*Kill]struct{}
}

// Add tracks a kill named name (for Close's error) whose tree is gone when
// gone reports true (gone must not block), recorded by record once gone
// (see Wait).
func (s *Set) Add(name string, gone func() bool, record func()) *Kill {
	k := &Kill{name: name, gone: gone, record: record, done: make(chan struct{}), set: s}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*Kill]struct{}{}
	}
	s.m[k] = struct{}{}
	s.mu.Unlock()
	return k
}

// pollMax bounds how long Wait takes to see a tree gone: it looks every
// millisecond at first, then less often, up to every pollMax.
const pollMax = 5 * time.Millisecond

// Wait waits for every kill tracked when it is called, until ctx ends.
// For a kill whose tree is gone before its grace ends, it claims it and
// calls its record, then Done; a kill whose grace ended meanwhile is waited
// for until its claimer calls Done. It returns the names of the kills still
// tracked when ctx ended (none when every one was recorded). A record runs
// on a goroutine of Wait's, which is left behind if ctx ends during it.
func (s *Set) Wait(ctx context.Context) (abandoned []string) {
	s.mu.Lock()
	ks := make([]*Kill, 0, len(s.m))
	for k := range s.m {
		ks = append(ks, k)
	}
	s.mu.Unlock()
	if len(ks) == 0 {
		return nil
	}
	all := make(chan struct{})
	go func() {
		defer close(all)
		for _, k := range ks {
			if !k.wait(ctx) {
				return
			}
		}
	}()
	select {
	case <-all:
	case <-ctx.Done():
	}
	for _, k := range ks {
		select {
		case <-k.done:
		default:
			abandoned = append(abandoned, k.name)
		}
	}
	return abandoned
}

// wait waits for k's tree to be gone or for k's claimer to be done, until
// ctx ends; it reports whether it did.
func (k *Kill) wait(ctx context.Context) bool {
	t := time.NewTimer(0)
	defer t.Stop()
	for d := time.Millisecond; ; d = min(2*d, pollMax) {
		select {
		case <-k.done:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if k.armed.Load() && k.gone() && k.Claim() {
			k.record()
			k.Done()
			if t := k.timer.Load(); t != nil {
				t.Stop()
			}
			return true
		}
		t.Reset(d)
	}
}
