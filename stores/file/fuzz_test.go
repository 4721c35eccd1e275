package file

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sessionwatchdog/watchdog"
)

// FuzzDecodeLine feeds arbitrary bytes to the Store's line decoder
// (seed corpus in testdata/fuzz/FuzzDecodeLine). It must never panic, and a
// line it accepts must re-encode to a line that decodes to the same event.
//
//	go test -run '^$' -fuzz FuzzDecodeLine -fuzztime 30s ./stores/file
func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"event_id":"e1","seq":1,"aggregate_type":"runtime_control","aggregate_id":"s","event_kind":"runtime.watchdog.start","window":1,"session_started_at":"2026-05-23T09:00:00Z","window_started_at":"2026-05-23T09:00:00Z","occurred_at":"2026-05-23T09:00:00Z","elapsed_seconds":0,"configured_budget_seconds":10}`))
	f.Add([]byte(`{"event_id":"e2","seq":2,"aggregate_id":"s","event_kind":"runtime.watchdog.cancel","window":1,"x_new":{"a":[1,2]}}`))
	f.Add([]byte(`{"event_id":"e3","seq":3,"aggregate_id":"s","event_kind":"k","window":0}`))
	f.Add([]byte(`{"event_id":"e3","seq":-1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{`))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := decodeLine(line)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := encodeLine(&buf, e); err != nil {
			// Only an Extra value that is not valid JSON can fail, and
			// decoding never produces one.
			t.Fatalf("re-encode of an accepted line: %v", err)
		}
		enc := buf.Bytes()
		if bytes.Count(enc, []byte("\n")) != 1 || enc[len(enc)-1] != '\n' {
			t.Fatalf("encoded event is not exactly one line: %q", enc)
		}
		e2, err := decodeLine(enc[:len(enc)-1])
		if err != nil {
			t.Fatalf("re-decode of %q: %v", enc, err)
		}
		var buf2 bytes.Buffer
		if err := encodeLine(&buf2, e2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, buf2.Bytes()) {
			t.Fatalf("encode/decode is not stable:\n%q\n%q", enc, buf2.Bytes())
		}
	})
}

// FuzzOpen writes arbitrary bytes as a store file and opens it. It
// must never panic: it either refuses the file with a *CorruptError, or
// opens it (truncating at most a torn last line) as a usable store.
func FuzzOpen(f *testing.F) {
	good := `{"event_id":"e1","seq":1,"aggregate_id":"s","event_kind":"runtime.watchdog.start","window":1}` + "\n"
	f.Add([]byte(good))
	f.Add([]byte(good + `{"event_id":"e2","seq":2,"aggregate_id":"s","event_kind":"runtime.watchdog.cancel","window":1}` + "\n"))
	f.Add([]byte(good + `{"event_id":"e2","se`))
	f.Add([]byte(good + "garbage\n" + good))
	f.Add([]byte("\n\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, WithSync(SyncOnClose))
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Line < 1 || ce.Path != path {
				t.Fatalf("open: %v, want a *CorruptError naming a line", err)
			}
			return
		}
		defer s.Close()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, raw) || (len(raw) > 0 && raw[len(raw)-1] != '\n') {
			t.Fatalf("open changed more than a torn tail: %q -> %q", data, raw)
		}
		if s.TornTail() == nil && len(raw) != len(data) {
			t.Fatal("bytes removed without a TornTail report")
		}
		ctx := context.Background()
		e := watchdog.Event{ID: "fuzz-new-event", AggregateID: "fuzz-agg", Kind: watchdog.KindStart, Window: 1}
		if err := s.Append(ctx, e); err != nil {
			t.Fatalf("append after open: %v", err)
		}
		if evs, err := s.Load(ctx, "fuzz-agg"); err != nil || len(evs) == 0 {
			t.Fatalf("load after append: %v %v", evs, err)
		}
	})
}
