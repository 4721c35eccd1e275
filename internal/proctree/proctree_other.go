//go:build unix && !linux

// Package proctree finds the processes of a command's tree: outside Linux,
// none (only the command's process group is signalled).
package proctree

import "syscall"

// SetParentDeath does nothing: outside Linux there is no parent-death
// signal, and a command outlives an orchestrator that is killed.
func SetParentDeath(*syscall.SysProcAttr) {}

// Proc is a process of a tree (none are found outside Linux).
type Proc struct{ Pid int }

// Tree finds nothing outside Linux: only the command's process group is
// signalled.
func Tree(int, int) []Proc { return nil }

// Alive reports false: no process is found outside Linux.
func (p Proc) Alive() bool { return false }
