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
// newline. The next Open truncates them, logs a warning (WithLogger) and
// reports them in Store.TornTail; every complete line survives. Any other
// bad line (not JSON, not a valid event, a seq that goes back, a repeated
// event_id, a second terminal event for a window) makes Open fail with a
// *CorruptError naming the file, line and offset, and leaves the file
// untouched. The store never skips a line.
//
// # Format
//
// The file is JSON Lines: one event per line, as watchdog.Event.MarshalJSON
// writes it (compacted, with its seq), in append order. The inspector
// (cmd/watchdog: watchdog inspect, watchdog verify) reads it, and so can any
// tool that reads JSON Lines.
//
// # Subscriptions and memory
//
// A Store implements watchdog.Subscriber, so watchdog.Follow works on it,
// within the process: events appended by this Store are delivered, each
// subscription through an unbounded queue that never blocks Append. The
// Store keeps a copy of every line in memory, which suits one process's
// sessions, not an unbounded history.
//
// All of a Store's methods are safe for concurrent use.
package file
