//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking advisory lock on f, so that a
// second process opening the same store file fails instead of interleaving
// appends.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
