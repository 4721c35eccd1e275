// Package testproc holds what the process-tree tests of the repository
// share (package reexec's and sessionwatchdog run's): Linux only.
package testproc
