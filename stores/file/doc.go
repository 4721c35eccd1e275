// Package file is a durable watchdog.EventStore on one local file: for a
// single process whose sessions must survive a restart, with no dependency
// beyond the watchdog module's own. For a fleet of processes sharing
// sessions, use the PostgreSQL store (module stores/postgres) instead.
//
// # Opening and closing
//
// Open the file (it is created, mode 0600, if it does not exist) and hand
// the Store to the Watchdog; close the Watchdog first, so that it records
// every pending event, then the Store:
//
//	store, err := file.Open("/var/lib/myapp/events.jsonl")
//	if err != nil {
//		return err // a *file.CorruptError names the bad line
//	}
//	defer store.Close()
//	w := watchdog.New(watchdog.WithStore(store))
//	defer w.Close(ctx)
//
// A later process that opens the same file resumes exactly where the last
// one stopped: seq continues, and the store still knows which session
// windows have ended, so watchdog.Watchdog.Resume and the one-terminal-event
// arbitration work across restarts. On Linux, macOS and the BSDs, Open
// takes an exclusive advisory lock (flock): a second Store on the same file,
// in this process or another, fails to open until the first is closed.
// Elsewhere (Windows) there is no lock: make sure of it yourself.
//
// # Where the file lives
//
// Open never follows a symbolic link at its path, even to a valid store
// file (the directories above it may be links): it refuses one with an
// error wrapping watchdog.ErrInvalidArgument that names the path and says
// it is a symbolic link, and refuses anything else that is not a regular
// file (a directory, a FIFO, a device) the same way, without opening it.
// On Unix it opens with O_NOFOLLOW and checks that the file it opened is
// the one at the path, so a link swapped in meanwhile is refused too. On
// Unix it also refuses a file that has another name (a hard link: a link
// count above 1), with an error that names the path and the link count:
// the store would append its events into the file another program, or a
// backup made with hard links, reads under the other name, and a
// compaction (which renames a new file over the path) would leave that name
// with the old content. A link made after Open is not seen.
//
// Open never changes an existing file's mode: it keeps it as it is (only a
// file it creates gets 0600), and logs a warning (WithLogger) when group or
// others may write to it. On Linux, macOS and the BSDs it checks the
// file's directory: one that is world-writable without the sticky bit is
// refused (error wrapping watchdog.ErrInvalidArgument, nothing created),
// since anyone could replace the store's file; one that is group-writable,
// or world-writable with the sticky bit (like /tmp), is used with a logged
// warning, since others may create the file before you or replace it. Keep
// the store in a directory only its owner can write to. On Windows neither
// mode is checked.
//
// # Durability
//
// WithSync chooses when the file is fsynced. SyncEveryAppend, the default,
// fsyncs before Append returns: an acknowledged event survives a power loss.
// SyncOnClose only writes, and fsyncs in Close: an acknowledged event
// survives the process being killed, not the machine going down, and
// appends are much faster.
//
// # Damaged files
//
// Each Append writes its batch with one write(2), so a process killed in
// the middle of one leaves at worst a torn last line: bytes after the last
// newline. The next Open truncates that tail only when it is recognisably
// a torn event of this store, at the file's start (a file with no newline)
// or after complete lines that are all valid. Trailing NUL bytes aside (a
// power loss can leave a zero-filled tail), the tail must be either
//
//   - nothing, after at least one complete line (the tail was only NULs);
//     or
//   - bytes that begin the way the store's lines begin,
//     {"aggregate_type":"runtime_control","event_id":" (or, in files
//     written by earlier versions, {"event_id":"), or a shorter prefix of
//     that, and that are either a JSON object cut short (the JSON decoder
//     reaches the end of the input inside it, with no syntax error before)
//     or one whole event that could follow the lines before it, only its
//     newline missing.
//
// Open then truncates the tail, fsyncs, logs a warning (WithLogger) and
// reports it in Store.TornTail; every complete line survives. Any other
// tail (a token or a one-line config file without a newline, text, a tail
// of NULs in a file with no complete line, a complete line that is not a
// valid next event) and any other bad line (not JSON, not a valid event, a
// seq that goes back, a repeated event_id, a second terminal event for a
// window) makes Open fail with a *CorruptError naming the file, line and
// offset, and leaves the file untouched. The store never skips a line.
//
// Seq never wraps: a file whose last seq is the largest uint64 still opens
// and loads, but Append refuses every new event with an error wrapping
// watchdog.ErrInvalidEvent (a refusal for good, which the Watchdog reports
// instead of retrying) and writes nothing; start a new file.
//
// # Format
//
// The file is JSON Lines: one event per line, as watchdog.Event.MarshalJSON
// writes it (compacted, with its seq), in append order. The inspector
// (cmd/sessionwatchdog: sessionwatchdog inspect, sessionwatchdog verify) reads it, and so can any
// tool that reads JSON Lines.
//
// # Subscriptions and memory
//
// A Store implements watchdog.Subscriber, so watchdog.Follow works on it,
// within the process: events appended by this Store are delivered, each
// subscription through an unbounded queue that never blocks Append. The
// Store keeps in memory an index of the lines it holds (each event's
// offset, length and id: about 230 bytes an event, see BENCHMARKS.md), not
// the lines themselves: Load reads a session's lines back from the file.
//
// # Retention and compaction
//
// Without a retention the file and the index keep every event. With
// WithRetention (see watchdog.Retention: the last N ended windows of each
// session, and ended sessions for a while, measured on the events'
// occurred_at) the Store forgets ended history as it appends, and compacts
// the file to drop the forgotten lines: when they are at least 1 MiB and
// half of the file, in Close, and in Open when the file holds any (Open
// rebuilds the index by applying the retention to the lines in order, so it
// forgets what the appends forgot). A compaction never touches an open
// window, keeps the lines it keeps byte for byte, in order, with their seq,
// and keeps the file's last line even if forgotten, so that seq goes on
// from it; the result is a store file like any other, which inspect and
// verify read (every window kept is whole, so verify re-derives its
// verdicts).
//
// Compaction is crash-safe: it writes the kept lines to path.compact (same
// mode as the file, locked), fsyncs it, renames it over the file and
// fsyncs the directory. A process killed before the rename leaves the old
// file whole, and path.compact, which the next Open with a retention
// removes; after it, the new file, which holds every event the Store held.
// A compaction that fails (a full disk) changes nothing and is logged
// (WithLogger); the next is tried once the forgotten bytes have doubled. If
// the directory's fsync fails after the rename, Append fails from then on,
// as after a failed fsync of the file: reopen the store. Appends wait while
// a compaction runs: it reads and writes the lines kept, so on average a
// forgotten byte costs about one byte copied.
//
// Open a file written with a retention with the same one: a file closed
// cleanly holds only what the retention kept, but one left by a crash may
// still hold forgotten lines, and with no retention (or a looser one) Open
// takes them back, or refuses the file (a *CorruptError) when a session id
// was reused after its old history was forgotten (two terminal events for
// its window 1).
//
// On Windows, where a file that is open may not be replaced, a compaction
// may fail (it is logged, and the file keeps growing).
//
// All of a Store's methods are safe for concurrent use.
package file
