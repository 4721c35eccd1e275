// Package lines records a session's output as evidence of work line by
// line, where a line that repeats one of the last few is not evidence: the
// progress counters' "must advance" rule, for text.
//
// A wedged worker can keep printing: the same heartbeat line every 500 ms,
// a spinner cycling through four frames. With watchdog.Session.Writer every
// write is evidence, so such a worker stays alive until its wall clock.
// Writer counts only lines that differ from the writer's last distinct
// lines. Use it for a channel that a stuck process may keep repeating
// (heartbeats, spinners and retry messages on stderr, a health line); keep
// Session.Writer for output whose every byte shows work (a token stream:
// Writer counts a line only when it ends).
package lines

import (
	"bytes"
	"hash/maphash"
	"io"
	"sync"

	"github.com/sessionwatchdog/watchdog"
)

// DefaultRecent is how many distinct lines a Writer remembers by default.
const DefaultRecent = 8

// maxLine is the longest line compared as a whole: a longer one is
// compared in pieces of maxLine bytes, so memory stays bounded.
const maxLine = 4096

// Option configures a Writer.
type Option func(*writer)

// Recent sets how many of the writer's last distinct lines a new line is
// compared with (default DefaultRecent; n < 1 means 1).
func Recent(n int) Option {
	return func(l *writer) { l.recent = max(n, 1) }
}

// Writer returns an io.Writer that passes every write to w unchanged (or
// discards it when w is nil) and records evidence of work on channel ch of
// session s, with one s.Touch, for a write in which a new line ends: a line
// (ended by "\n" or "\r") identical to none of the writer's last distinct
// lines (DefaultRecent unless Recent says otherwise). A line is compared by a
// 64-bit hash of its bytes; an empty line is not evidence; a line longer
// than 4 KiB counts as one line per 4 KiB piece; a partial line counts when
// it ends. The memory is the writer's own: use one Writer per stream.
//
// The evidence is recorded before the bytes are passed to w; Write returns
// what w.Write returns. It is safe for concurrent use when w is, and it
// holds no lock while w.Write runs.
func Writer(s *watchdog.Session, ch watchdog.Channel, w io.Writer, opts ...Option) io.Writer {
	if w == nil {
		w = io.Discard
	}
	l := &writer{s: s, ch: ch, w: w, recent: DefaultRecent}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	return l
}

type writer struct {
	s      *watchdog.Session
	ch     watchdog.Channel
	w      io.Writer
	recent int

	mu   sync.Mutex
	h    maphash.Hash // the current line's bytes so far
	n    int          // the current line's length so far
	last []uint64     // hashes of the last distinct lines, a ring
	next int          // the ring's oldest entry, once it is full
}

func (l *writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	fresh := l.scan(p)
	l.mu.Unlock()
	if fresh {
		l.s.Touch(l.ch)
	}
	return l.w.Write(p)
}

// scan reads p's lines and reports whether one that ended is new.
func (l *writer) scan(p []byte) (fresh bool) {
	for len(p) > 0 {
		i := eol(p)
		part := p
		if i >= 0 {
			part = p[:i]
		}
		for len(part) > 0 {
			k := min(len(part), maxLine-l.n)
			l.h.Write(part[:k])
			l.n += k
			part = part[k:]
			if l.n == maxLine {
				fresh = l.end() || fresh
			}
		}
		if i < 0 {
			break
		}
		if l.n > 0 {
			fresh = l.end() || fresh
		}
		p = p[i+1:]
	}
	return fresh
}

// eol is the index of p's first "\r" or "\n", or -1: two IndexByte
// scans (vectorized), the second only over the line the first found,
// where IndexAny reads byte by byte.
func eol(p []byte) int {
	i := bytes.IndexByte(p, '\n')
	head := p
	if i >= 0 {
		head = p[:i]
	}
	if j := bytes.IndexByte(head, '\r'); j >= 0 {
		return j
	}
	return i
}

// end ends the current line and reports whether it is new.
func (l *writer) end() bool {
	sum := l.h.Sum64()
	l.h.Reset()
	l.n = 0
	for _, x := range l.last {
		if x == sum {
			return false
		}
	}
	if len(l.last) < l.recent {
		l.last = append(l.last, sum)
	} else {
		l.last[l.next] = sum
		l.next = (l.next + 1) % l.recent
	}
	return true
}
