//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package file

import "io/fs"

// noFollow is 0 where open(2) has no O_NOFOLLOW: Open relies on its Lstat
// checks before and after opening the file.
const noFollow = 0

// checkDir checks nothing where Unix permission bits do not apply (on
// Windows, Go reports every directory as mode 0777).
func checkDir(string) (othersMayWrite bool, mode fs.FileMode, err error) { return false, 0, nil }

// othersCanWrite is false where Unix permission bits do not apply.
func othersCanWrite(fs.FileInfo) bool { return false }

// linkCount is 1: the link count is not checked outside Unix.
func linkCount(fs.FileInfo) uint64 { return 1 }
