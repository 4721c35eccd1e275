//go:build !linux

package watchdog

import "time"

// backstop is a second wake-up for the real clock's scheduler timer, on
// Linux only (see backstop_linux.go); elsewhere there is none.
type backstop struct{ C chan struct{} }

func newBackstop() *backstop          { return nil }
func (b *backstop) arm(time.Duration) {}
func (b *backstop) stop()             {}
func (b *backstop) close()            {}
