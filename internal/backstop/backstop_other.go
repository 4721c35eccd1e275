//go:build !linux

// Package backstop is a second wake-up for the Watchdog's real-clock
// scheduler timer, on Linux only (see backstop_linux.go); elsewhere there is
// none and New returns nil.
package backstop

import "time"

// Backstop is a second wake-up for the scheduler timer; there is none off
// Linux.
type Backstop struct{ C chan struct{} }

// New returns nil: there is no backstop off Linux.
func New() *Backstop { return nil }

// Arm does nothing.
func (b *Backstop) Arm(time.Duration) {}

// Stop does nothing.
func (b *Backstop) Stop() {}

// Close does nothing.
func (b *Backstop) Close() {}
