//go:build unix && !linux

package watchdog

import "syscall"

// setParentDeath does nothing: outside Linux there is no parent-death
// signal, and a command outlives an orchestrator that is killed.
func setParentDeath(*syscall.SysProcAttr) {}

// proc is a process of the command's tree (none are found outside Linux).
type proc struct{ pid int }

// tree finds nothing outside Linux: only the command's process group is
// signalled.
func tree(int, int) []proc { return nil }

func (p proc) alive() bool { return false }
