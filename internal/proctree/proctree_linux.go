//go:build linux

// Package proctree finds the processes of a command's tree, from /proc:
// the repository's one walk of it, for watchdog.Command's kill, the guard
// (internal/guard) and sessionwatchdog run's second signal.
package proctree

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// SetParentDeath asks the kernel to SIGKILL the command when the process
// that started it dies (PR_SET_PDEATHSIG): an orchestrator that is
// SIGKILLed or OOM-killed leaves no command of its own behind. The signal
// is tied to the OS thread that calls Start; the Go runtime ends a thread
// only when a goroutine locked to it (runtime.LockOSThread) returns
// without unlocking, so do not start commands from such a goroutine.
func SetParentDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// Proc is a process found in /proc: its pid and its start time (in clock
// ticks since boot), which tells it apart from a later process that reuses
// the pid.
type Proc struct {
	Pid   int
	start uint64
}

// Tree returns every live process of process group pgid and every live
// process below root in the process tree, from /proc: those that left the
// group (setsid, setpgid) included. With pgid -1 it lists only those below
// root.
func Tree(pgid, root int) []Proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	children := map[int][]Proc{}
	var out []Proc
	seen := map[int]bool{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		p := Proc{pid, st.start}
		children[st.ppid] = append(children[st.ppid], p)
		if st.pgrp == pgid {
			out, seen[pid] = append(out, p), true
		}
	}
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c.Pid] {
				out, seen[c.Pid] = append(out, c), true
			}
			queue = append(queue, c.Pid)
		}
	}
	return out
}

// Alive reports whether p still runs (and is not a zombie).
func (p Proc) Alive() bool {
	st, ok := readStat(p.Pid)
	return ok && st.start == p.start
}

type stat struct {
	ppid, pgrp int
	start      uint64
}

// readStat reads a process's parent, process group and start time from
// /proc/pid/stat, and whether it is a live process (not a zombie).
func readStat(pid int) (st stat, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, false
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is the state (field 3), f[1] the parent (4), f[2] the process
	// group (5), f[19] the start time (22).
	if len(f) < 20 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return st, false
	}
	var e1, e2, e3 error
	st.ppid, e1 = strconv.Atoi(string(f[1]))
	st.pgrp, e2 = strconv.Atoi(string(f[2]))
	st.start, e3 = strconv.ParseUint(string(f[19]), 10, 64)
	return st, e1 == nil && e2 == nil && e3 == nil
}
