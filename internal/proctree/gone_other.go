//go:build unix && !linux

package proctree

import "syscall"

// Gone reports whether process group pgid is gone: outside Linux the tree
// is not listed, and a member not yet reaped (a zombie) counts as alive.
func Gone(pgid int, _ []Proc) bool { return syscall.Kill(-pgid, 0) != nil }
