package stream

import (
	"context"
	"io"
	"sync"

	"github.com/sessionwatchdog/watchdog"
)

// Reader guards rc, a body read under ctx (an HTTP response's, a
// subprocess's pipe), as a call named name with the limits l (see the
// package doc): every Read that returns bytes is progress. On a stall the
// guard closes rc, which unblocks a Read in progress, and Read returns the
// guard's error (matching ErrStalled; watchdog.ErrDeadlineExceeded for the
// cap; ctx's cause). Close ends the guard and closes rc. Limits the call
// refuses make Read return an error wrapping watchdog.ErrInvalidArgument.
// Like most readers, it is for one goroutine at a time, except that the
// guard closes rc from another. Always Close it: until Close or io.EOF the
// guard runs, and a body left unread stalls and is recorded as such.
func Reader(ctx context.Context, name string, rc io.ReadCloser, l Limits) io.ReadCloser {
	r := &reader{rc: rc}
	r.g.start(ctx, name, l, func() { r.closeBody() })
	return r
}

type reader struct {
	g        guard
	rc       io.ReadCloser
	read     uint64 // bytes read: the progress value
	closing  sync.Once
	closeErr error
}

func (r *reader) Read(p []byte) (int, error) {
	if r.g.ctx == nil || r.g.stopped.Load() {
		return 0, r.g.finish()
	}
	n, err := r.rc.Read(p)
	if n > 0 {
		r.read += uint64(n)
		watchdog.Progress(r.g.ctx, r.read)
	}
	if err != nil {
		if r.g.stopped.Load() {
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

func (r *reader) Close() error {
	r.g.finish()
	r.closeBody()
	return r.closeErr
}

func (r *reader) closeBody() {
	r.closing.Do(func() { r.closeErr = r.rc.Close() })
}
