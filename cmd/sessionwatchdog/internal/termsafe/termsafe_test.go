package termsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile holds what a log may carry to a terminal: an OSC title change, a
// screen clear, a colour, an 8-bit CSI, a bidi override, a line separator,
// invalid UTF-8, and a newline and a tab inside one field.
const hostile = "a\x1b]0;pwned\x07b\x1b[2J\x1b[31mred\u009b1mc\u202eevil\u2028d\xff\xfee\nf\tg\x7f"

// clean reports the first byte or rune of out a terminal could act on, other
// than the newlines and tabs allowed when keep is true.
func clean(t *testing.T, out []byte, keep bool) {
	t.Helper()
	if !utf8.Valid(out) {
		t.Fatalf("output is not valid UTF-8: %q", out)
	}
	for i, r := range string(out) {
		if keep && (r == '\n' || r == '\t') {
			continue
		}
		if unsafeRune(r) {
			t.Fatalf("output holds %U at byte %d: %q", r, i, out)
		}
	}
}

func TestStringEscapesEveryRuneATerminalActsOn(t *testing.T) {
	got := String(hostile)
	want := `a\u001b]0;pwned\u0007b\u001b[2J\u001b[31mred\u009b1mc\u202eevil\u2028d\xff\xfee\u000af\u0009g\u007f`
	if got != want {
		t.Errorf("String(hostile)\n got %s\nwant %s", got, want)
	}
	clean(t, []byte(got), false)
}

func TestStringKeepsPrintableTextAsItIs(t *testing.T) {
	for _, s := range []string{"", "agent-42", "séance ☃ 日本語 🐕", `back\slash "quoted"`} {
		if got := String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = String("agent-42 idle 12.5s") }); n != 0 {
		t.Errorf("String allocates %v times on a clean string, want 0", n)
	}
}

func TestWriterKeepsTheLayoutsNewlinesAndTabs(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	if _, err := w.Write([]byte("session \x1b[2Jx\n  a\tb\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "session \\u001b[2Jx\n  a\tb\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// JSON through a Writer is still valid JSON with the same value: the
// encoder leaves C1 controls and bidi overrides raw, the Writer escapes them
// the JSON way.
func TestWriterKeepsJSONValidAndEqual(t *testing.T) {
	in := map[string]string{"session": hostile, "ok": "plain ☃"}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := NewWriter(&b).Write(raw); err != nil {
		t.Fatal(err)
	}
	clean(t, b.Bytes(), false)
	var out map[string]string
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("escaped JSON does not parse: %v\n%s", err, b.String())
	}
	want := map[string]string{}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if out["session"] != want["session"] || out["ok"] != want["ok"] {
		t.Errorf("escaped JSON decodes to %q, want %q", out, want)
	}
}

// A rune split across Writes (as a tabwriter or a small buffer may split
// it) is written whole, not as two invalid bytes; a rune never completed is
// escaped on Flush.
func TestWriterJoinsARuneSplitAcrossWrites(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	s := []byte("x☃\u202ey")
	for i := range s {
		if _, err := w.Write(s[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), `x☃\u202ey`; got != want {
		t.Errorf("byte-by-byte: got %q, want %q", got, want)
	}
	b.Reset()
	w.Write([]byte("z\xe2\x98"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `z\xe2\x98`; got != want {
		t.Errorf("incomplete rune at Flush: got %q, want %q", got, want)
	}
}

// Whatever the bytes and however they are split into Writes, the terminal
// gets valid UTF-8 with no control but newlines and tabs, and the same
// bytes as one Write of the whole.
func FuzzWriter(f *testing.F) {
	f.Add([]byte(hostile), uint8(3))
	f.Add([]byte("☃\xe2\x98\x83\xf0\x9f\x90"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		var whole, split bytes.Buffer
		w := NewWriter(&whole)
		w.Write(in)
		w.Flush()
		clean(t, whole.Bytes(), true)
		n := int(step%7) + 1
		w = NewWriter(&split)
		for i := 0; i < len(in); i += n {
			w.Write(in[i:min(i+n, len(in))])
		}
		w.Flush()
		if whole.String() != split.String() {
			t.Fatalf("split into %d-byte writes: %q, whole: %q", n, split.String(), whole.String())
		}
		s := String(string(in))
		clean(t, []byte(s), false)
		if strings.ContainsAny(s, "\n\t") {
			t.Fatalf("String left a newline or tab: %q", s)
		}
	})
}
