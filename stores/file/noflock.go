//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package file

import "os"

// lockFile is a no-op where flock is not available: the caller must make
// sure that one process at a time opens a store file.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) {}
