package stream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/sessionwatchdog/watchdog"
)

// MaxLine is the longest line, in bytes, Reader passes to its progress
// function. A longer line counts as progress once, without being passed
// (keep-alives are short; a line that long is data).
const MaxLine = 64 << 10

// Reader opens a body with open and guards it with the limits l, as a call
// named name on ctx (see the package doc). open is called once, before
// Reader returns, with the guard's context: it must make its request on
// that context (http.NewRequestWithContext) and return the body (a
// subprocess's pipe may simply be returned). The time open takes counts
// toward l.FirstProgress and l.Cap; a stall while it waits cancels its
// context, and Reader returns the guard's error.
//
// progress says which bytes are progress. With nil, every Read that
// returns bytes is (the progress value recorded is the bytes read so far).
// Otherwise the body is taken as lines, and progress is called with each
// complete line, without its "\n" or "\r\n", and says whether it is
// progress (the value recorded is the progress lines so far): for
// server-sent events, a "data:" line with content is, while ": ping"
// comments, blank lines and empty deltas are not, and keep nothing alive.
// The line is only valid during the call. A line longer than MaxLine
// counts as progress once without being passed; a last line without a
// newline is not looked at.
//
// On a stall the guard closes the body, which unblocks a Read in progress,
// and Read returns the guard's error (matching ErrStalled;
// watchdog.ErrDeadlineExceeded for the cap; ctx's cause). Close ends the
// guard and closes the body. Bad input (a nil open, a Cap that is not
// positive, an invalid name), an error from open, or ctx already done make
// Reader return a nil body and the error (wrapping
// watchdog.ErrInvalidArgument for bad input; matching ErrStalled or
// watchdog.ErrDeadlineExceeded if the guard stopped open); open's body, if
// any, is then closed. Like most readers the body is for one goroutine at
// a time, except that the guard closes it from another. Always Close it:
// until Close or io.EOF the guard runs, and a body left unread stalls and
// is recorded as such.
func Reader(ctx context.Context, name string, open func(ctx context.Context) (io.ReadCloser, error), l watchdog.CallLimits, progress func(line []byte) bool) (io.ReadCloser, error) {
	if open == nil {
		return nil, fmt.Errorf("%w: stream %q: nil open function", watchdog.ErrInvalidArgument, name)
	}
	r := &reader{progress: progress}
	r.g.start(ctx, name, l, r.closeBody)
	if r.g.ctx == nil {
		return nil, r.g.finish()
	}
	rc, err := open(r.g.ctx)
	if err == nil && rc == nil {
		err = fmt.Errorf("%w: stream %q: open returned a nil body and no error", watchdog.ErrInvalidArgument, name)
	}
	r.mu.Lock()
	r.rc = rc
	if r.closed && rc != nil { // the guard stopped while open ran
		r.closeErr = rc.Close()
	}
	r.mu.Unlock()
	if err == nil && !r.g.stopped.Load() {
		return r, nil
	}
	r.closeBody()
	if gerr := r.g.finish(); gerr != nil && r.g.stopped.Load() {
		err = gerr // why open failed, or why its body is of no use
	}
	return nil, err
}

type reader struct {
	g        guard
	rc       io.ReadCloser // set once, under mu, before Reader returns
	progress func([]byte) bool
	line     []byte // the start of a line a Read cut in two (progress != nil)
	long     bool   // the current line is longer than MaxLine and was counted
	mu       sync.Mutex
	closed   bool
	closeErr error
}

func (r *reader) Read(p []byte) (int, error) {
	if r.g.stopped.Load() {
		return 0, r.g.finish()
	}
	n, err := r.rc.Read(p)
	if n > 0 {
		if r.progress == nil {
			r.g.n += uint64(n)
			watchdog.Progress(r.g.ctx, r.g.n)
		} else {
			r.lines(p[:n])
		}
	}
	if err != nil {
		// A body read on the guard's context may fail with the context's
		// error before the guard has said why it ended it: wait for it.
		if r.g.stopped.Load() || r.g.ctx.Err() != nil {
			if gerr := r.g.finish(); gerr != nil {
				return n, gerr
			}
		}
		if err == io.EOF {
			r.g.finish()
		}
	}
	return n, err
}

// lines passes each complete line of b, with what came of it before, to
// the progress function.
func (r *reader) lines(b []byte) {
	for len(b) > 0 {
		seg, rest, complete := bytes.Cut(b, []byte{'\n'})
		b = rest
		if !r.long && len(r.line)+len(seg) > MaxLine {
			r.long, r.line = true, r.line[:0]
			r.g.chunk()
		}
		switch {
		case r.long:
		case !complete:
			r.line = append(r.line, seg...)
		case len(r.line) > 0:
			r.line = append(r.line, seg...)
			r.check(r.line)
			r.line = r.line[:0]
		default:
			r.check(seg)
		}
		if complete {
			r.long = false
		}
	}
}

func (r *reader) check(line []byte) {
	if r.progress(bytes.TrimSuffix(line, []byte{'\r'})) {
		r.g.chunk()
	}
}

func (r *reader) Close() error {
	r.g.finish()
	r.closeBody()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closeErr
}

// closeBody closes the body once; called when the guard's call ends first, on a
// stall, maybe before open has returned it (Reader closes it then).
func (r *reader) closeBody() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.rc != nil {
		r.closeErr = r.rc.Close()
	}
}
