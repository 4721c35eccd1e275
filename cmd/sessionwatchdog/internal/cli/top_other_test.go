//go:build !unix

package cli

// topRole: the top tests' roles are unix-only, as run is.
func topRole() (code int, ok bool) { return 0, false }
