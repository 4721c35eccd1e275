//go:build !linux

// Package guard is the re-exec guard behind watchdog.Command: Linux only.
// Elsewhere Init and Wrap do nothing, and a command outlives an
// orchestrator that is killed.
package guard

import (
	"os/exec"
	"time"
)

// Margin is how much longer than the grace the orchestrator waits for the
// guard: there is none here.
const Margin = 0

// Init does nothing outside Linux.
func Init() {}

// Enabled reports false: there is no guard outside Linux.
func Enabled() bool { return false }

// Wrap leaves cmd as it is and reports false: there is no guard outside
// Linux.
func Wrap(*exec.Cmd, time.Duration) bool { return false }
