package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
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

// FuzzOpen writes arbitrary bytes as a store file (seed corpus in
// testdata/fuzz/FuzzOpen: a token or a config file without a newline, torn
// events after a valid line and at the file's start, a seq at its maximum)
// and opens it. Open must never panic, and either
//   - refuse the file with a *CorruptError naming the bad line, leaving the
//     file byte for byte as it was, or
//   - open it, having removed at most a recognisable torn tail (see
//     tornTailOracle), reported by TornTail.
//
// Then an Append of a new event (or, when the file's last seq is the
// maximum, its refusal, leaving the file as it was) and a reopen must give
// back every event of the file, and the new one.
//
//	go test -run '^$' -fuzz '^FuzzOpen$' -fuzztime 60s ./stores/file
func FuzzOpen(f *testing.F) {
	good := `{"event_id":"e1","seq":1,"aggregate_id":"s","event_kind":"runtime.watchdog.start","window":1}` + "\n"
	f.Add([]byte(good))
	f.Add([]byte(good + `{"event_id":"e2","seq":2,"aggregate_id":"s","event_kind":"runtime.watchdog.cancel","window":1}` + "\n"))
	f.Add([]byte(good + `{"event_id":"e2","se`))
	f.Add([]byte(good + "garbage\n" + good))
	f.Add([]byte("\n\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "events.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, WithSync(SyncOnClose))
		if err != nil {
			if raw, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(raw, data) {
				t.Fatalf("a refused file was modified (%v): %q -> %q", rerr, data, raw)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Path != path || ce.Line < 1 || ce.Offset < 0 || ce.Offset > int64(len(data)) {
				t.Fatalf("open: %v, want a *CorruptError naming a line", err)
			}
			if before := data[:ce.Offset]; bytes.Count(before, []byte("\n")) != ce.Line-1 || (len(before) > 0 && before[len(before)-1] != '\n') {
				t.Fatalf("open: %v: line %d does not begin at offset %d", err, ce.Line, ce.Offset)
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
		if removed := data[len(raw):]; len(removed) > 0 {
			torn := s.TornTail()
			if torn == nil || torn.Offset != int64(len(raw)) || torn.Bytes != int64(len(removed)) || torn.Path != path {
				t.Fatalf("%d bytes removed at %d, TornTail reports %v", len(removed), len(raw), torn)
			}
			if !tornTailOracle(removed, len(raw) > 0) {
				t.Fatalf("open truncated a tail that is not recognisably a torn event: %q", removed)
			}
		} else if s.TornTail() != nil {
			t.Fatalf("TornTail %v, but nothing was removed", s.TornTail())
		}

		// What the file holds, canonically encoded, per aggregate.
		want := map[string][][]byte{}
		ids := map[string]bool{}
		var last uint64
		for line := range bytes.Lines(raw) {
			e, err := decodeLine(line[:len(line)-1])
			if err != nil {
				t.Fatalf("open accepted line %q: %v", line, err)
			}
			want[e.AggregateID] = append(want[e.AggregateID], canonical(t, e))
			ids[e.ID] = true
			last = e.Seq
		}
		e := watchdog.Event{ID: "fuzz-new-event", AggregateID: "fuzz-agg", Kind: watchdog.KindStart, Window: 1}
		for ids[e.ID] {
			e.ID += "+"
		}
		ctx := context.Background()
		err = s.Append(ctx, e)
		if last == math.MaxUint64 {
			if !errors.Is(err, watchdog.ErrInvalidEvent) {
				t.Fatalf("append after seq %d: %v, want ErrInvalidEvent", last, err)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, raw) {
				t.Fatalf("a refused append changed the file: %q -> %q", raw, now)
			}
		} else {
			if err != nil {
				t.Fatalf("append after open: %v", err)
			}
			e.Seq = last + 1
			want[e.AggregateID] = append(want[e.AggregateID], canonical(t, e))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s2, err := Open(path, WithSync(SyncOnClose))
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s2.Close()
		if s2.TornTail() != nil {
			t.Fatalf("reopen found a torn tail: %v", s2.TornTail())
		}
		for agg, lines := range want {
			evs, err := s2.Load(ctx, agg)
			if err != nil || len(evs) != len(lines) {
				t.Fatalf("reopen: load %q: %d events (%v), want %d", agg, len(evs), err, len(lines))
			}
			for i, ev := range evs {
				if got := canonical(t, ev); !bytes.Equal(got, lines[i]) {
					t.Fatalf("reopen: %q event %d:\n got %s\nwant %s", agg, i, got, lines[i])
				}
			}
		}
	})
}

// tornTailOracle restates, independently of Store.tornEvent, which bytes
// after the last newline Open may truncate: trailing NULs aside, nothing
// (after a complete line), or the start of a line as the store writes it
// that is JSON cut short, or one whole event (Open itself checks that it
// could follow the lines before it).
func tornTailOracle(tail []byte, afterLine bool) bool {
	p := bytes.TrimRight(tail, "\x00")
	if len(p) == 0 {
		return afterLine
	}
	begins := false
	for _, start := range []string{`{"aggregate_type":"runtime_control","event_id":"`, `{"event_id":"`} {
		begins = begins || strings.HasPrefix(string(p), start) || strings.HasPrefix(start, string(p))
	}
	if !begins {
		return false
	}
	if json.Valid(p) {
		_, err := decodeLine(p)
		return err == nil
	}
	// Cut short: the scanner finds no error in p itself. Put a byte after
	// it that JSON allows nowhere (not even in a string): the first error
	// must be at that byte. (json.Unmarshal's own error for p is no guide:
	// for "0." or "tru" at the end it reports the input's end as a bad
	// character.)
	var v any
	var se *json.SyntaxError
	err := json.Unmarshal(append(bytes.Clone(p), 0x01), &v)
	return errors.As(err, &se) && se.Offset == int64(len(p))+1
}

// canonical is e as the store encodes it, after a decode, so that lines
// written by hand and by the store compare equal.
func canonical(t *testing.T, e watchdog.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeLine(&buf, e); err != nil {
		t.Fatal(err)
	}
	d, err := decodeLine(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		t.Fatalf("decode %q: %v", buf.Bytes(), err)
	}
	buf.Reset()
	if err := encodeLine(&buf, d); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
