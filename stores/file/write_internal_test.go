package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sessionwatchdog/watchdog"
)

// A write that fails half-way (disk full) leaves neither bytes in the file
// nor state in memory: the batch is not recorded and may be retried.
func TestFileStoreUndoesAFailedWrite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := func(id string, kind string) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: "a", Kind: kind, Window: 1}
	}
	if err := s.Append(ctx, ev("e1", watchdog.KindStart)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	errFull := errors.New("no space left on device")
	orig := fileWrite
	fileWrite = func(f *os.File, b []byte) (int, error) {
		n, _ := f.Write(b[:len(b)/2])
		return n, errFull
	}
	err = s.Append(ctx, ev("e2", watchdog.KindResume), ev("e3", watchdog.KindCancel))
	fileWrite = orig
	if !errors.Is(err, errFull) {
		t.Fatalf("err = %v, want the write error", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Fatalf("a failed write left %d bytes behind", len(after)-len(before))
	}
	// Nothing was recorded: the same events (a terminal one included) are
	// accepted on retry, with the next seq.
	if err := s.Append(ctx, ev("e2", watchdog.KindResume), ev("e3", watchdog.KindCancel)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	evs, err := s.Load(ctx, "a")
	if err != nil || len(evs) != 3 || evs[1].Seq != 2 || evs[2].Seq != 3 {
		t.Fatalf("after retry: %v %v", evs, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s2.Close()
}
