//go:build linux

// Package backstop is a second wake-up for the Watchdog's real-clock
// scheduler timer (see Backstop).
package backstop

import (
	"math"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Backstop is a second wake-up for the real clock's scheduler timer, on
// Linux: a timerfd read through the network poller, armed backstopDelay
// after the timer.
//
// The Go runtime runs due timers when a P schedules, but an idle-priority
// garbage collection worker does not stop for them: it stops for runnable
// goroutines and for the network poller only (runtime.pollWork). While a
// collection runs on an otherwise idle machine, a due timer could wait for
// the worker's preemption, up to 10 ms. A storm of fires keeps garbage
// collections coming, and that wait was most of the tail of the fire
// lateness (see BENCHMARKS.md). A goroutine blocked on a timerfd is seen
// by the poller as soon as it expires, and the worker yields to it.
//
// It is also the usual wake-up of an idle machine: there the runtime sleeps
// in epoll_wait, whose timeout is in whole milliseconds, so a timer due in
// less than a millisecond is typically more than backstopDelay late, and
// the timerfd, which expires to the nanosecond, wakes the scheduler first
// (in a review's count, 1,993 passes of 1,997 over 20,000 deadlines). Each
// arming costs a timerfd_settime, and each such wake-up a goroutine switch
// and a read. On a busy machine the timer usually wins; the timer's later
// wake-up, or the backstop's, then finds nothing due.
type Backstop struct {
	f    *os.File
	conn syscall.RawConn // guards the fd against its close
	C    chan struct{}   // receives when the timerfd expired
	done chan struct{}   // closed when the reader goroutine returns
}

// backstopDelay is how long after the timer's due instant the backstop
// fires.
const backstopDelay = 200 * time.Microsecond

// New returns a Backstop and starts its reader goroutine, which
// ends when Close is called. It returns nil if the timerfd cannot be made,
// or if the Go runtime's clock is not the system's: inside a
// testing/synctest bubble, whose time is virtual, a timerfd would measure
// the wrong time, and a goroutine blocked on it would keep the bubble from
// ever going idle (its fake time would never advance).
func New() *Backstop {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return nil
	}
	if d := time.Now().UnixNano() - ts.Nano(); d > int64(time.Minute) || d < -int64(time.Minute) {
		return nil // a synctest bubble: its time starts in 2000
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "watchdog-backstop") // non-blocking: read through the poller
	conn, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil
	}
	b := &Backstop{f: f, conn: conn, C: make(chan struct{}, 1), done: make(chan struct{})}
	go b.read()
	return b
}

func (b *Backstop) read() {
	defer close(b.done)
	var buf [8]byte // the expiration count
	for {
		if _, err := b.f.Read(buf[:]); err != nil {
			// Closed, or not pollable after all (os.NewFile could not
			// register it: EAGAIN would come back at once, forever).
			// The poller absorbs EAGAIN and EINTR of a polled file.
			// The timer alone wakes the scheduler from now on.
			return
		}
		select {
		case b.C <- struct{}{}:
		default:
		}
	}
}

// Arm sets the backstop to expire backstopDelay after d from now.
func (b *Backstop) Arm(d time.Duration) {
	if d < math.MaxInt64-backstopDelay {
		d = max(d, 0) + backstopDelay
	}
	b.set(d)
}

// Stop disarms the backstop.
func (b *Backstop) Stop() { b.set(0) }

func (b *Backstop) set(d time.Duration) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))} // zero disarms
	_ = b.conn.Control(func(fd uintptr) {
		_ = unix.TimerfdSettime(int(fd), 0, &spec, nil)
	})
}

// Close stops the reader goroutine and waits for it.
func (b *Backstop) Close() {
	_ = b.f.Close()
	<-b.done
}
