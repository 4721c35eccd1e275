//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/sessionwatchdog/watchdog"
)

// noFollow makes open(2) fail on a symbolic link at the path's last
// component instead of following it.
const noFollow = syscall.O_NOFOLLOW

// checkDir refuses a directory that anyone may write to without the sticky
// bit: anyone could replace the store's file. It reports whether others may
// still create or replace files in it (group-writable, or world-writable
// with the sticky bit), which Open logs as a warning. A directory it cannot
// stat is left to open(2) to report.
func checkDir(dir string) (othersMayWrite bool, mode fs.FileMode, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return false, 0, nil
	}
	mode = fi.Mode()
	if mode.Perm()&0o002 != 0 && mode&fs.ModeSticky == 0 {
		return true, mode, fmt.Errorf("%w: file store directory %s is world-writable without the sticky bit (mode %v): anyone could replace the store's file", watchdog.ErrInvalidArgument, dir, mode)
	}
	return mode.Perm()&0o022 != 0, mode, nil
}

// othersCanWrite reports whether group or others may write to the file.
func othersCanWrite(fi fs.FileInfo) bool { return fi.Mode().Perm()&0o022 != 0 }

// linkCount is how many names (hard links) the file has; 1 if fi is nil or
// does not say.
func linkCount(fi fs.FileInfo) uint64 {
	if fi != nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return uint64(st.Nlink)
		}
	}
	return 1
}
