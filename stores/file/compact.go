package file

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog"
)

// compactMin is the least forgotten bytes for which an Append compacts the
// file (besides their being at least half of it).
const compactMin = 1 << 20

// compactSuffix names the file a compaction writes beside the store's, then
// renames over it.
const compactSuffix = ".compact"

// compactStep is called at each step of a compaction; the crash test
// replaces it to die there.
var compactStep = func(step string) {}

func (f *Store) compactPath() string { return f.path + compactSuffix }

// retains reports whether the Store has a retention.
func (f *Store) retains() bool { return f.cfg.ret != watchdog.Retention{} }

// lastForgotten reports whether the retention forgot the file's last line.
// (An id the Store holds is on one line only, its latest.) Called with f.mu
// held.
func (f *Store) lastForgotten() bool {
	if f.size == 0 {
		return false
	}
	_, ok := f.ids[f.last.id]
	return !ok
}

// removable is how many forgotten bytes a compaction removes: all but the
// file's last line, which it keeps, so that seq goes on from it after a
// reopen. Called with f.mu held.
func (f *Store) removable() int64 {
	if f.lastForgotten() {
		return f.dead - int64(f.last.n) - 1
	}
	return f.dead
}

// compactIf compacts the file if cond holds and the Store has a retention.
// A failed compaction loses nothing (the file is as it was): it is logged,
// and the next is tried once the forgotten bytes have doubled. Called with
// f.mu held.
func (f *Store) compactIf(cond bool) {
	if !cond || !f.retains() || f.broken != nil {
		return
	}
	if err := f.compact(); err != nil {
		f.retry = 2 * f.dead
		f.cfg.log.Warn("watchdog: file store: compaction failed; the file keeps the events the retention forgot",
			zap.String("path", f.path), zap.Error(err))
		return
	}
	f.retry = 0
}

// compact rewrites the file with the lines the Store holds (and the last
// line), in file order: it writes them to path.compact, fsyncs it, renames
// it over the store's file and fsyncs the directory, then appends to the new
// file. A crash before the rename leaves the old file whole (and
// path.compact, which the next Open removes); after it, the new one, which
// holds every line the Store held. The new file keeps the old one's mode and
// is locked before it takes the path, so no other Store can open it in
// between. Called with f.mu held.
func (f *Store) compact() (err error) {
	fi, err := f.file.Stat()
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	perm := fi.Mode().Perm()
	tmpPath := f.compactPath()
	if err := os.Remove(tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compact: remove %s: %w", tmpPath, err)
	}
	tmp, err := os.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND|noFollow, perm)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			tmp.Close()
			os.Remove(tmpPath)
		}
	}()
	if err := tmp.Chmod(perm); err != nil { // the umask may have narrowed it
		return fmt.Errorf("compact: %w", err)
	}
	if err := lockFile(tmp); err != nil {
		return fmt.Errorf("compact: lock %s: %w", tmpPath, err)
	}

	refs := make([]*ref, 0, f.idx.Live()+1)
	f.idx.All(func(r *ref) { refs = append(refs, r) })
	lastForgotten := f.lastForgotten()
	last := f.last
	if lastForgotten {
		refs = append(refs, &last)
	}
	slices.SortFunc(refs, func(a, b *ref) int { return cmp.Compare(a.off, b.off) })
	offs := make([]int64, len(refs))
	r := bufio.NewReaderSize(io.NewSectionReader(f.file, 0, f.size), 1<<16)
	w := bufio.NewWriterSize(tmp, 1<<16)
	var at, size int64
	for i, l := range refs {
		if _, err := r.Discard(int(l.off - at)); err != nil {
			return fmt.Errorf("compact: read %s: %w", f.path, err)
		}
		n := int64(l.n) + 1 // with its newline
		if _, err := io.CopyN(w, r, n); err != nil {
			return fmt.Errorf("compact: copy line at offset %d: %w", l.off, err)
		}
		offs[i] = size
		at, size = l.off+n, size+n
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("compact: write %s: %w", tmpPath, err)
	}
	compactStep("written")
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("compact: fsync %s: %w", tmpPath, err)
	}
	compactStep("synced")
	if err := os.Rename(tmpPath, f.path); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	renamed = true
	compactStep("renamed")
	// The path names the new file now: the Store goes on with it, whatever
	// happens next.
	derr := syncDir(filepath.Dir(f.path))
	unlockFile(f.file)
	f.file.Close()
	f.file, f.size, f.dead = tmp, size, 0
	for i, l := range refs {
		l.off = offs[i]
	}
	f.last = last
	if f.size > 0 {
		f.last.off = f.size - int64(f.last.n) - 1
	}
	if lastForgotten {
		f.dead = int64(last.n) + 1
	}
	ids := make(map[string]struct{}, len(f.ids))
	f.idx.All(func(r *ref) { ids[r.id] = struct{}{} })
	f.ids = ids // a map keeps the room of its largest size: start afresh
	f.idx.Shrink()
	if derr != nil {
		// The rename may not survive a power loss, and the events appended
		// from now on are in the new file only: stop, as after a failed
		// fsync.
		f.broken = derr
		return fmt.Errorf("compact: fsync directory: %w", derr)
	}
	compactStep("done")
	return nil
}
