//go:build linux

package testproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// KillHolders SIGKILLs every process but this one that holds path open
// (the FIFO a test's process tree holds, fd 3), and returns them, one
// "pid command line" a line: what a failing test left behind, killed so
// that it neither lingers nor hangs the test's cleanup.
func KillHolders(path string) string {
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() { // the test itself reads the fifo
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); l == path {
				b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				left = append(left, fmt.Sprintf("%d %s", pid, bytes.TrimSpace(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))))
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
				break
			}
		}
	}
	return strings.Join(left, "\n")
}
