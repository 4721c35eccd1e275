// Package eventlog reads a watchdog event log in JSON Lines: one
// watchdog.Event (as its MarshalJSON writes it) per line, the format of the
// file store. Reading is strict: a line that is not a valid event is an
// error naming the file and the line, never silently skipped.
package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sessionwatchdog/watchdog"
)

// MaxLineBytes is the longest line Read accepts (16 MiB).
const MaxLineBytes = 16 << 20

// LineError is an error in one line of an event log.
type LineError struct {
	// File is the name of the log ("-" or "<stdin>" for standard input).
	File string
	// Line is the 1-based line number.
	Line int
	// Err is what is wrong with the line.
	Err error
}

// Error returns "file:line: what is wrong".
func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// Unwrap returns the underlying error.
func (e *LineError) Unwrap() error { return e.Err }

// ReadFile reads the event log at path; path "-" reads stdin.
func ReadFile(path string, stdin io.Reader) ([]watchdog.Event, error) {
	if path == "-" {
		return Read(stdin, "<stdin>")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	defer f.Close()
	return Read(f, path)
}

// Read decodes every line of r, in order. name is used in errors. An empty
// input is an empty log. Each line must be a JSON object that passes
// watchdog.Event.Validate, the stores' own check (a non-empty, valid UTF-8
// event_id, aggregate_id and event_kind, and a window of at least 1), and no
// event_id may appear twice. A last line without its newline (a writer that
// died mid-append) is accepted only if it is a complete, valid event.
func Read(r io.Reader, name string) ([]watchdog.Event, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var events []watchdog.Event
	seen := make(map[string]int)
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF && len(line) == 0 {
			return events, nil
		}
		torn := err == io.EOF
		if err != nil && !torn {
			if errors.Is(err, errLineTooLong) {
				return nil, &LineError{File: name, Line: lineNo, Err: err}
			}
			return nil, fmt.Errorf("%s: read line %d: %w", name, lineNo, err)
		}
		e, derr := decode(line)
		if derr == nil {
			if prev, dup := seen[e.ID]; dup {
				derr = fmt.Errorf("event_id %q appears twice (first on line %d)", e.ID, prev)
			}
		}
		if derr != nil {
			if torn {
				derr = fmt.Errorf("incomplete last line (no trailing newline; was the writer killed mid-append?): %w", derr)
			}
			return nil, &LineError{File: name, Line: lineNo, Err: derr}
		}
		seen[e.ID] = lineNo
		events = append(events, e)
		if torn {
			return events, nil
		}
	}
}

var errLineTooLong = fmt.Errorf("line longer than %d bytes", MaxLineBytes)

// readLine returns the next line without its newline, io.EOF with a last
// line that has none, or io.EOF alone at the end.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > MaxLineBytes+1 {
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

func decode(line []byte) (watchdog.Event, error) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return watchdog.Event{}, errors.New("empty line, want one JSON event per line")
	}
	if trimmed[0] != '{' {
		return watchdog.Event{}, fmt.Errorf("not a JSON object: %s", excerpt(trimmed))
	}
	var e watchdog.Event
	if err := json.Unmarshal(trimmed, &e); err != nil {
		return watchdog.Event{}, fmt.Errorf("invalid event JSON: %v", err)
	}
	if err := e.Validate(); err != nil {
		return e, err
	}
	return e, nil
}

func excerpt(b []byte) string {
	const n = 40
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
