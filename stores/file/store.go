package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/relay"
	"github.com/sessionwatchdog/watchdog/internal/retain"
)

// TornTail describes an incomplete last line that Open found and truncated:
// the bytes a process wrote before it died in the middle of an Append,
// recognisably an event of this store cut short (the package doc, Damaged
// files, states the rule). No complete line (no event whose Append returned
// nil) is ever part of it.
// Open fills it in and nothing changes it afterwards, so it may be read from
// any goroutine. A Store that needed no repair reports a nil *TornTail; the
// zero value describes no repair.
type TornTail struct {
	// Path is the store's file.
	Path string
	// Line is the 1-based line number of the torn line.
	Line int
	// Offset is where the torn line began; the file was truncated to it.
	Offset int64
	// Bytes is how many bytes were removed.
	Bytes int64
}

// String describes the repair, naming file, line, offset and size.
func (t *TornTail) String() string {
	return fmt.Sprintf("%s:%d: torn last line (%d bytes at offset %d, no trailing newline) truncated", t.Path, t.Line, t.Bytes, t.Offset)
}

// CorruptError is returned by Open when a complete line of the file (one
// that ends with a newline) is not a valid event: unparsable JSON, an
// invalid event, a seq that does not increase, a repeated event_id, or a
// second terminal event for a session window; or when the bytes after the
// last newline are not recognisably a torn event of this store (a token or
// a config file, say: see the package doc, Damaged files). The store never
// skips such a line and leaves the file untouched: repair or move it by
// hand. Read it with errors.As. Open fills in every field; the zero value
// names no line.
type CorruptError struct {
	// Path is the store's file.
	Path string
	// Line is the 1-based line number of the bad line.
	Line int
	// Offset is the byte offset where the line begins.
	Offset int64
	// Err says what is wrong with the line.
	Err error
}

// Error names the file, the line and the problem.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("watchdog: file store %s:%d (offset %d): corrupt line: %v", e.Path, e.Line, e.Offset, e.Err)
}

// Unwrap returns what is wrong with the line.
func (e *CorruptError) Unwrap() error { return e.Err }

// windowKey names one session window: the store arbitrates one terminal
// event per key.
type windowKey struct {
	id     string
	window int
}

// Store is a watchdog.EventStore that appends events to one file in JSON
// Lines format: one event per line, each the event's JSON (as
// watchdog.Event.MarshalJSON writes it, compacted, with its seq) followed by
// a newline, in append order. The file is created with mode 0600 (an
// existing file keeps its mode) and only ever appended to, except that a
// Store with a retention (WithRetention) compacts it, replacing it with a
// file of the lines it keeps, same mode. Open never follows a symbolic link
// at its path. It implements watchdog.Subscriber, with in-process
// subscriptions that never block Append.
//
// Open it with Open and release it with Close. Reopening a file resumes
// exactly where it was: seq continues and the terminal events of every
// session window are known again. One Store at a time may have the file
// open: Open takes an exclusive advisory lock (flock) on Linux, macOS and
// the BSDs.
//
// Durability follows the SyncPolicy (default SyncEveryAppend). A batch is
// atomic within the process: a refused batch writes nothing. It is written
// with one write(2), so a process killed during it leaves at worst its
// complete lines plus a torn last line, which the next Open truncates and
// reports (Store.TornTail). Seq never wraps: once it reaches the largest
// uint64, Append refuses every new event.
//
// A Store keeps in memory an index of the lines it holds (each event's
// offset, length and id: some 230 bytes an event), not the lines: Load reads
// them back from the file. Without a retention (WithRetention) the file and
// the index grow with every event; with one, the Store forgets ended
// sessions' history and compacts the file (see the package doc, Retention
// and compaction). For a fleet use the PostgreSQL store (module
// stores/postgres). All methods are safe for concurrent use. The zero value
// is not usable: call Open.
type Store struct {
	path string
	cfg  config
	torn *TornTail

	mu     sync.Mutex
	file   *os.File
	size   int64
	seq    uint64
	idx    *retain.Index[ref] // each session's lines, and its windows' terminal events
	ids    map[string]struct{}
	last   ref   // the file's last line
	dead   int64 // bytes of the file's lines the retention forgot, newlines included
	retry  int64 // after a failed compaction: dead bytes at which to try again
	subs   map[string]map[*relay.Relay[watchdog.Event]]context.CancelFunc
	closed bool
	broken error // a failed write that could not be undone; every later Append fails
	wg     sync.WaitGroup
}

// ref is where one line of the file is: its offset and length (without its
// newline), and its event's id.
type ref struct {
	off int64
	n   int
	id  string
}

// newIndex gives the Store an empty index (and id set) under its retention.
func (f *Store) newIndex() {
	f.ids = make(map[string]struct{})
	f.idx = retain.New(retainPolicy(f.cfg.ret), f.forget)
}

// forget drops a line the retention forgot from the in-memory state; the
// next compaction drops it from the file. Called with f.mu held.
func (f *Store) forget(r ref) {
	delete(f.ids, r.id)
	f.dead += int64(r.n) + 1
}

// fileWrite writes b to f; the crash test replaces it to die mid-write.
var fileWrite = func(f *os.File, b []byte) (int, error) { return f.Write(b) }

// Open opens the JSON Lines file at path, creating it (mode 0600) if it
// does not exist; its directory must exist. It reads every line back: a torn
// last line (bytes after the last newline that are recognisably an event
// cut short by a process killed mid-write; the package doc, Damaged files,
// states the rule) is truncated, logged and reported by TornTail; any other
// bad line, or a tail that is not a torn event, is a *CorruptError naming
// the file and line, the file is left untouched and the store is not
// opened. With a retention (WithRetention) Open applies it to the lines in
// order, as the appends did, removes path.compact (left by a compaction a
// crash interrupted) and compacts the file if it holds forgotten lines.
// Without options the Store uses SyncEveryAppend, keeps every event and
// logs nothing. An empty path, an unknown SyncPolicy, a Retention with a
// negative field, a symbolic link at path (never
// followed), a path that is not a regular file, and, on Unix, a file with
// another name (a hard link: events would land in a file others read under
// that name; the error gives the link count) or a directory
// that is world-writable without the sticky bit are errors wrapping
// watchdog.ErrInvalidArgument that name the path. An existing file keeps
// its mode; Open logs a warning when group or others may write to the file
// or (on Unix) to its directory.
//
// Open may be called from any goroutine. On Linux, macOS and the BSDs it
// returns an error when the file is already open through another Store, in
// this process or another; elsewhere the caller must make sure that it is
// not.
func Open(path string, opts ...Option) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty file store path", watchdog.ErrInvalidArgument)
	}
	cfg := config{log: zap.NewNop()}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.sync != SyncEveryAppend && cfg.sync != SyncOnClose {
		return nil, fmt.Errorf("%w: unknown file sync policy %d", watchdog.ErrInvalidArgument, int(cfg.sync))
	}
	if err := retainPolicy(cfg.ret).Check(); err != nil {
		return nil, fmt.Errorf("watchdog: file store %s: %w: %w", path, watchdog.ErrInvalidArgument, err)
	}
	if cfg.log == nil {
		cfg.log = zap.NewNop()
	}
	file, created, err := openRegular(path, cfg.log)
	if err != nil {
		return nil, err
	}
	if created && cfg.sync == SyncEveryAppend {
		// A new file: make its directory entry durable too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			file.Close()
			return nil, fmt.Errorf("watchdog: open file store %s: sync directory: %w", path, err)
		}
	}
	if err := lockFile(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("watchdog: file store %s is in use by another process: %w", path, err)
	}
	f := &Store{
		path: path,
		cfg:  cfg,
		file: file,
		subs: make(map[string]map[*relay.Relay[watchdog.Event]]context.CancelFunc),
	}
	f.newIndex()
	if err := f.load(); err != nil {
		unlockFile(file)
		file.Close()
		return nil, err
	}
	if f.retains() {
		if f.cfg.ret.KeepWindows > 0 {
			f.idx.RaiseFloors()
		}
		// A compaction that a crash interrupted left its file behind.
		if err := os.Remove(f.compactPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.cfg.log.Warn("watchdog: file store: cannot remove an interrupted compaction's file",
				zap.String("path", f.compactPath()), zap.Error(err))
		}
		f.mu.Lock()
		f.compactIf(f.removable() > 0)
		f.mu.Unlock()
	}
	return f, nil
}

// openRegular opens (or creates, mode 0600) the regular file at path
// without following a symbolic link there, and reports whether it created
// it. It refuses a symbolic link, anything but a regular file, and (on
// Unix) a file with another name (a hard link), checks the
// directory (checkDir) and logs a warning when others may write to the
// directory or to the file. The Lstat before opening keeps Open from
// opening a FIFO or a device at all; O_NOFOLLOW (on Unix) and the check
// after opening, that the file opened is the one at path, close the race
// with a path swapped in between.
func openRegular(path string, log *zap.Logger) (*os.File, bool, error) {
	lfi, lerr := os.Lstat(path)
	if lerr == nil {
		if err := checkType(path, lfi); err != nil {
			return nil, false, err
		}
	}
	dir := filepath.Dir(path)
	othersMayWrite, dirMode, err := checkDir(dir)
	if err != nil {
		return nil, false, err
	}
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|noFollow, 0o600)
	if err != nil {
		if lfi, lerr := os.Lstat(path); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			return nil, false, symlinkError(path)
		}
		return nil, false, fmt.Errorf("watchdog: open file store: %w", err)
	}
	fi, err := file.Stat()
	if err == nil {
		err = checkType(path, fi)
	}
	if n := linkCount(fi); err == nil && n > 1 {
		err = fmt.Errorf("%w: file store %s has %d links (names): another name of the file, another program's or a backup's, would receive the store's appends and keep the old content after a compaction; give the store a file of its own", watchdog.ErrInvalidArgument, path, n)
	}
	if err == nil {
		var now fs.FileInfo
		if now, err = os.Lstat(path); err == nil {
			if err = checkType(path, now); err == nil && !os.SameFile(fi, now) {
				err = fmt.Errorf("watchdog: file store %s was replaced while it was being opened", path)
			}
		}
	}
	if err != nil {
		file.Close()
		return nil, false, err
	}
	if othersMayWrite {
		log.Warn("watchdog: file store: directory writable by other users, who may create or replace the store's file",
			zap.String("path", path), zap.String("dir", dir), zap.Stringer("mode", dirMode))
	}
	if othersCanWrite(fi) {
		log.Warn("watchdog: file store: file writable by other users (Open keeps an existing file's mode)",
			zap.String("path", path), zap.Stringer("mode", fi.Mode()))
	}
	return file, errors.Is(lerr, fs.ErrNotExist), nil
}

// checkType refuses a symbolic link and anything else that is not a
// regular file.
func checkType(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return symlinkError(path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: file store %s is not a regular file (mode %v)", watchdog.ErrInvalidArgument, path, fi.Mode())
	}
	return nil
}

func symlinkError(path string) error {
	return fmt.Errorf("%w: file store %s is a symbolic link: Open never follows one; give the path of the file itself", watchdog.ErrInvalidArgument, path)
}

// load reads the file, rebuilding the in-memory state, and truncates a torn
// last line.
func (f *Store) load() error {
	if _, err := f.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("watchdog: file store %s: %w", f.path, err)
	}
	r := bufio.NewReaderSize(f.file, 1<<16)
	var off int64
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			if len(line) > 0 {
				if err := f.tornEvent(line, lineNo > 1); err != nil {
					return &CorruptError{Path: f.path, Line: lineNo, Offset: off, Err: err}
				}
				return f.truncateTorn(lineNo, off, int64(len(line)))
			}
			break
		}
		if err != nil {
			return fmt.Errorf("watchdog: file store %s: read line %d: %w", f.path, lineNo, err)
		}
		body := line[:len(line)-1]
		e, err := decodeLine(body)
		if err == nil {
			err = f.admit(e)
		}
		if err != nil {
			return &CorruptError{Path: f.path, Line: lineNo, Offset: off, Err: err}
		}
		f.record(e, off, len(body))
		off += int64(len(line))
	}
	f.size = off
	return nil
}

// lineStarts are how the lines the store writes begin: with
// aggregate_type, then event_id (watchdog.Event.MarshalJSON's order), and,
// in files written before the codec put aggregate_type first, with
// event_id. A tail that begins otherwise is not a torn event of this store.
var lineStarts = [...][]byte{
	[]byte(`{"aggregate_type":"runtime_control","event_id":"`),
	[]byte(`{"event_id":"`),
}

// beginsLikeALine reports whether p begins with one of lineStarts, or is a
// shorter prefix of one.
func beginsLikeALine(p []byte) bool {
	for _, start := range lineStarts {
		if n := min(len(p), len(start)); bytes.Equal(p[:n], start[:n]) {
			return true
		}
	}
	return false
}

// tornEvent returns nil if tail, the bytes after the last newline, is
// recognisably an event of this store that a process killed mid-write left
// behind, and what is wrong with it otherwise. afterLine says whether
// complete (valid) lines come before it. The rule, as the package doc
// states it: NUL bytes at the end are ignored (a power loss can leave a
// zero-filled tail); what remains must be empty, after at least one
// complete line, or begin like a line (beginsLikeALine) and be either a
// JSON object cut short (the decoder reaches the end of the input inside
// it, with no syntax error before) or one complete event that can follow
// the lines before it, only its newline missing.
func (f *Store) tornEvent(tail []byte, afterLine bool) error {
	p := bytes.TrimRight(tail, "\x00")
	if len(p) == 0 {
		if afterLine {
			return nil
		}
		return errors.New("no newline and only NUL bytes, in a file with no complete line: not a torn event of this store, left untouched")
	}
	if !beginsLikeALine(p) {
		return fmt.Errorf("no newline, and it does not begin like an event of this store (%s): not a torn event, left untouched", lineStarts[0])
	}
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(p)).Decode(&v)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil // cut short
	}
	if err == nil {
		// A whole object: acceptable only as the next event, its newline
		// missing.
		var e watchdog.Event
		if e, err = decodeLine(p); err == nil {
			if err = f.admit(e); err == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("no newline, and not an event cut short: %w; left untouched", err)
}

func (f *Store) truncateTorn(lineNo int, off, n int64) error {
	if err := f.file.Truncate(off); err != nil {
		return fmt.Errorf("watchdog: file store %s: truncate torn line %d: %w", f.path, lineNo, err)
	}
	if err := f.file.Sync(); err != nil {
		return fmt.Errorf("watchdog: file store %s: sync after truncating torn line %d: %w", f.path, lineNo, err)
	}
	f.size = off
	f.torn = &TornTail{Path: f.path, Line: lineNo, Offset: off, Bytes: n}
	f.cfg.log.Warn("watchdog: file store: torn last line truncated",
		zap.String("path", f.path), zap.Int("line", lineNo), zap.Int64("offset", off), zap.Int64("bytes", n))
	return nil
}

// validateForJSON is Event.Validate plus what a store that keeps events as
// JSON needs: ids and kind in valid UTF-8, which JSON would otherwise
// rewrite (so that the event would come back under another id).
func validateForJSON(e watchdog.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	for _, s := range []string{e.ID, e.AggregateID, e.Kind} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: event %q: id, aggregate_id or event_kind is not valid UTF-8", watchdog.ErrInvalidEvent, e.ID)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}

// decodeLine decodes one line (without its newline) of a store file. It
// accepts exactly what Store writes: a JSON object that is a valid event
// with a seq.
func decodeLine(b []byte) (watchdog.Event, error) {
	var e watchdog.Event
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return watchdog.Event{}, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return watchdog.Event{}, err
	}
	if err := e.Validate(); err != nil {
		return watchdog.Event{}, err
	}
	if e.Seq == 0 {
		return watchdog.Event{}, fmt.Errorf("event %s has no seq", e.ID)
	}
	return e, nil
}

// encodeLine encodes e (with its seq) as one line, newline included.
func encodeLine(buf *bytes.Buffer, e watchdog.Event) error {
	b, err := e.MarshalJSON()
	if err != nil {
		return err
	}
	// Compact: Extra may hold raw JSON with newlines in its whitespace.
	if err := json.Compact(buf, b); err != nil {
		return fmt.Errorf("event %s: %w", e.ID, err)
	}
	buf.WriteByte('\n')
	return nil
}

// admit checks that e, read from the file, can follow what was read so far.
func (f *Store) admit(e watchdog.Event) error {
	if e.Seq <= f.seq {
		return fmt.Errorf("event %s: seq %d does not increase (previous %d)", e.ID, e.Seq, f.seq)
	}
	if _, dup := f.ids[e.ID]; dup {
		return fmt.Errorf("event_id %s appears twice", e.ID)
	}
	if e.Terminal() {
		if prev, ok := f.idx.Terminal(e.AggregateID, e.Window); ok {
			return fmt.Errorf("event %s: %w", e.ID, endedError(e.AggregateID, e.Window, prev))
		}
	}
	return nil
}

// endedError says that a session window already has its terminal event
// (prev), or that the retention forgot it (prev "").
func endedError(id string, window int, prev string) error {
	if prev == "" {
		return fmt.Errorf("session %q window %d already ended (the store's retention has forgotten its events)", id, window)
	}
	return fmt.Errorf("session %q window %d already ended by event %s", id, window, prev)
}

// record adds e, its line at off with n bytes (no newline), to the
// in-memory state, which applies the retention.
func (f *Store) record(e watchdog.Event, off int64, n int) {
	f.seq = e.Seq
	f.ids[e.ID] = struct{}{}
	f.last = ref{off, n, e.ID}
	var term string
	if e.Terminal() {
		term = e.ID
	}
	f.idx.Add(e.AggregateID, e.Window, term, e.OccurredAt, f.last)
}

// Path returns the file's path, as given to Open. It never changes: it may
// be called from any goroutine, also after Close.
func (f *Store) Path() string { return f.path }

// TornTail returns the torn last line Open truncated, or nil if the file
// ended cleanly. It never changes after Open: it may be called from any
// goroutine, also after Close.
func (f *Store) TornTail() *TornTail { return f.torn }

func (f *Store) closedErr() error {
	return fmt.Errorf("%w: file store %s", watchdog.ErrClosed, f.path)
}

// Append implements watchdog.EventStore: it writes the new events of the
// batch as lines with one write(2) and, with SyncEveryAppend, fsyncs before
// returning. Events already in the file are skipped. A second terminal
// event for a session window, already in the file or in the same batch, is
// an error wrapping watchdog.ErrAlreadyDecided, and an invalid event (or one
// whose ids or kind are not valid UTF-8, or a new event when seq has
// reached the largest uint64, since seq never wraps) an error wrapping
// watchdog.ErrInvalidEvent that names the event; either refuses the whole
// batch. On a write or
// fsync error the batch is not recorded; if the file cannot be restored to
// its previous length, every later Append returns that error (reopen the
// store to recover). After Close it returns an error wrapping
// watchdog.ErrClosed. Concurrent Appends are serialized: each batch's lines
// are contiguous in the file, in seq order.
func (f *Store) Append(ctx context.Context, events ...watchdog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.append(events, nil)
}

// AppendEach implements watchdog.EachAppender: like Append, with one write(2)
// and one fsync for the batch, but an event that Append would refuse (a
// second terminal event for its window, an invalid event) is refused alone
// and the rest is recorded. A write or fsync error, or Close, is every
// event's error.
func (f *Store) AppendEach(ctx context.Context, events []watchdog.Event) []error {
	errs := make([]error, len(events))
	err := ctx.Err()
	if err == nil {
		err = f.append(events, errs)
	}
	for i := range errs {
		if err != nil && errs[i] == nil {
			errs[i] = err
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// append records events. With errs nil (Append) a refused event refuses
// the batch; else (AppendEach) it is refused alone, its error in errs.
func (f *Store) append(events []watchdog.Event, errs []error) error {
	refuse := func(i int, err error) error {
		if errs == nil {
			return err
		}
		errs[i] = err
		return nil
	}
	valid := make([]bool, len(events))
	for i, e := range events {
		if err := validateForJSON(e); err != nil {
			if err := refuse(i, err); err != nil {
				return err
			}
			continue
		}
		valid[i] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closedErr()
	}
	if f.broken != nil {
		return fmt.Errorf("watchdog: file store %s: unusable after an earlier write error: %w", f.path, f.broken)
	}
	batch := make(map[windowKey]string)
	seen := make(map[string]struct{}, len(events))
	var buf bytes.Buffer
	type pending struct {
		e          watchdog.Event
		start, end int
	}
	var todo []pending
	seq := f.seq
	for i, e := range events {
		if !valid[i] {
			continue
		}
		if _, dup := f.ids[e.ID]; dup {
			continue
		}
		if _, dup := seen[e.ID]; dup {
			continue
		}
		if e.Terminal() {
			k := windowKey{e.AggregateID, e.Window}
			if prev, ok := f.idx.Terminal(e.AggregateID, e.Window); ok {
				if err := refuse(i, fmt.Errorf("%w: %w", watchdog.ErrAlreadyDecided, endedError(e.AggregateID, e.Window, prev))); err != nil {
					return err
				}
				continue
			}
			if prev, ok := batch[k]; ok {
				if err := refuse(i, fmt.Errorf("%w: session %q window %d has two terminal events in one batch (the first %s)", watchdog.ErrAlreadyDecided, e.AggregateID, e.Window, prev)); err != nil {
					return err
				}
				continue
			}
		}
		if seq == math.MaxUint64 {
			// seq never wraps: a wrapped seq (0, omitted from the line)
			// would make the file unreadable. No retry can cure it.
			if err := refuse(i, fmt.Errorf("%w: event %q: no seq left after %d, the maximum: this file can record no more events; start a new one", watchdog.ErrInvalidEvent, e.ID, seq)); err != nil {
				return err
			}
			continue
		}
		e.Seq = seq + 1
		start := buf.Len()
		if err := encodeLine(&buf, e); err != nil {
			buf.Truncate(start)
			if err := refuse(i, fmt.Errorf("%w: %v", watchdog.ErrInvalidEvent, err)); err != nil {
				return err
			}
			continue
		}
		seq++
		seen[e.ID] = struct{}{}
		if e.Terminal() {
			batch[windowKey{e.AggregateID, e.Window}] = e.ID
		}
		todo = append(todo, pending{e, start, buf.Len() - 1})
	}
	if len(todo) == 0 {
		return nil
	}
	if err := f.write(buf.Bytes()); err != nil {
		return err
	}
	data := buf.Bytes()
	for _, p := range todo {
		line := data[p.start:p.end:p.end]
		f.record(p.e, f.size+int64(p.start), p.end-p.start)
		if subs := f.subs[p.e.AggregateID]; len(subs) > 0 {
			ev, err := decodeLine(line)
			if err != nil { // cannot happen: we just encoded it
				ev = p.e
			}
			for s := range subs {
				s.Push(ev)
			}
		}
	}
	f.size += int64(len(data))
	f.compactIf(f.dead >= compactMin && f.dead >= f.size-f.dead && f.dead >= f.retry)
	return nil
}

// write appends b to the file and syncs per policy; on failure it restores
// the file's previous length. Called with f.mu held.
func (f *Store) write(b []byte) error {
	n, err := fileWrite(f.file, b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err == nil && f.cfg.sync == SyncEveryAppend {
		if err = f.file.Sync(); err != nil {
			// After a failed fsync the page cache state is unknown: stop.
			f.broken = err
			return fmt.Errorf("watchdog: file store %s: fsync: %w", f.path, err)
		}
	}
	if err != nil {
		if terr := f.file.Truncate(f.size); terr != nil {
			f.broken = errors.Join(err, terr)
		}
		return fmt.Errorf("watchdog: file store %s: write: %w", f.path, err)
	}
	return nil
}

// Load implements watchdog.EventStore: the aggregate's events in append
// (seq) order, none for an unknown aggregate. The returned events are the
// caller's. It may run concurrently with Append and sees every batch whose
// Append returned before it was called. After Close it returns an error
// wrapping watchdog.ErrClosed.
func (f *Store) Load(ctx context.Context, aggregateID string) ([]watchdog.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, f.closedErr()
	}
	refs := make([]ref, 0, f.idx.Len(aggregateID))
	total := 0
	f.idx.Each(aggregateID, func(r ref) {
		refs = append(refs, r)
		total += r.n
	})
	// Read under the lock (a compaction replaces the file), decode after.
	buf := make([]byte, total)
	at := 0
	for _, r := range refs {
		if _, err := f.file.ReadAt(buf[at:at+r.n], r.off); err != nil {
			f.mu.Unlock()
			return nil, fmt.Errorf("watchdog: file store %s: read %q event at offset %d: %w", f.path, aggregateID, r.off, err)
		}
		at += r.n
	}
	f.mu.Unlock()
	out := make([]watchdog.Event, 0, len(refs))
	at = 0
	for _, r := range refs {
		e, err := decodeLine(buf[at : at+r.n])
		if err != nil {
			return nil, fmt.Errorf("watchdog: file store %s: decode %q event at offset %d: %w", f.path, aggregateID, r.off, err)
		}
		at += r.n
		out = append(out, e)
	}
	return out, nil
}

// Subscribe implements watchdog.Subscriber: the channel delivers, in order,
// every event of aggregateID appended by this Store after Subscribe returns
// (events written by other processes are not seen: one process owns the
// file). Each subscription has one goroutine and an unbounded queue, so a
// slow reader never blocks Append. The channel is closed when ctx ends or
// the store is closed. After Close it returns an error wrapping
// watchdog.ErrClosed.
func (f *Store) Subscribe(ctx context.Context, aggregateID string) (<-chan watchdog.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s := relay.New[watchdog.Event]()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		return nil, f.closedErr()
	}
	if f.subs[aggregateID] == nil {
		f.subs[aggregateID] = make(map[*relay.Relay[watchdog.Event]]context.CancelFunc)
	}
	f.subs[aggregateID][s] = cancel
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		defer func() {
			cancel()
			f.mu.Lock()
			delete(f.subs[aggregateID], s)
			if len(f.subs[aggregateID]) == 0 {
				delete(f.subs, aggregateID)
			}
			f.mu.Unlock()
		}()
		s.Run(sctx)
	}()
	return s.C(), nil
}

// Close ends every subscription (closing its channel) and waits for their
// goroutines; with a retention, compacts the file if it holds lines the
// retention forgot (a compaction that fails is logged, not returned: the
// file keeps them); fsyncs the file (whatever the policy), releases the
// lock and closes the file. Later calls return nil and do nothing; Append,
// Load and Subscribe then return an error wrapping watchdog.ErrClosed. It
// may be called concurrently with the other methods.
func (f *Store) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for _, subs := range f.subs {
		for _, cancel := range subs {
			cancel()
		}
	}
	if f.broken == nil {
		f.compactIf(f.removable() > 0)
	}
	f.mu.Unlock()
	f.wg.Wait()
	err := f.file.Sync()
	unlockFile(f.file)
	if cerr := f.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("watchdog: close file store %s: %w", f.path, err)
	}
	return nil
}

var _ interface {
	watchdog.EventStore
	watchdog.EachAppender
	watchdog.Subscriber
} = (*Store)(nil)

func retainPolicy(r watchdog.Retention) retain.Policy {
	return retain.Policy{Windows: r.KeepWindows, After: r.ForgetAfter}
}
