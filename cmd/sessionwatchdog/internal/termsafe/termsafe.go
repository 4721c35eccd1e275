// Package termsafe neutralises text from an event log before it reaches a
// terminal. An event log is input the inspector does not trust: a session
// id, a channel name or a message may carry escape sequences that set the
// terminal's title, clear the screen or recolour what follows, bidi
// controls that reorder what a reader sees, or invalid UTF-8.
//
// Every rune that a terminal may act on instead of printing is written as
// an escape that prints as itself: C0 controls, DEL and C1 controls
// (unicode.IsControl), the Unicode bidi controls, and the line and paragraph
// separators U+2028 and U+2029 become \u001b-style escapes, and each byte of
// invalid UTF-8 becomes \xff-style. The \u escapes are also JSON's, so JSON
// passed through a Writer stays valid JSON with the same value (JSON text is
// valid UTF-8, and the encoder already escapes C0 inside strings).
//
// String escapes a field, newlines and tabs included, so a field cannot fake
// a line or a column. Writer is the choke point in front of the terminal: it
// escapes everything String does except the newlines and tabs the output's
// own layout uses.
package termsafe

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// unsafeRune reports whether a terminal might act on r instead of printing it.
func unsafeRune(r rune) bool {
	if unicode.IsControl(r) { // C0, DEL, C1
		return true
	}
	switch {
	case r == 0x061C, r == 0x200E, r == 0x200F, // ALM, LRM, RLM
		r >= 0x202A && r <= 0x202E, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069, // LRI, RLI, FSI, PDI
		r == 0x2028, r == 0x2029:   // line and paragraph separators
		return true
	}
	return false
}

// appendEscaped appends s to dst with every unsafe rune escaped; when keep
// is true, '\n' and '\t' pass unchanged.
func appendEscaped(dst []byte, s []byte, keep bool) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			dst = append(dst, `\x`...)
			dst = appendHex(dst, uint32(c), 2)
		case keep && (r == '\n' || r == '\t'):
			dst = append(dst, c)
		case unsafeRune(r): // every unsafe rune is in the BMP
			dst = append(dst, `\u`...)
			dst = appendHex(dst, uint32(r), 4)
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return dst
}

func appendHex(dst []byte, v uint32, digits int) []byte {
	h := strconv.FormatUint(uint64(v), 16)
	dst = append(dst, strings.Repeat("0", digits-len(h))...)
	return append(dst, h...)
}

// String returns s with every rune a terminal might act on escaped,
// newlines and tabs included. A string with nothing to escape is returned
// as it is, without allocating.
func String(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return string(appendEscaped(make([]byte, 0, len(s)+8), []byte(s), false))
		}
	}
	return s
}

// Writer escapes what it writes like String, except that newlines and tabs
// pass unchanged. A rune split across two Writes is held back until its
// last byte arrives; Flush writes what is held (as \x escapes: a rune that
// never completes is invalid UTF-8). A Writer is not safe for concurrent
// use.
type Writer struct {
	w       io.Writer
	pending []byte // the first bytes of a rune split across Writes
	buf     []byte
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes the result. It returns len(p) when the
// escaped bytes were written in full, even though more or fewer bytes
// reached the underlying writer.
func (t *Writer) Write(p []byte) (int, error) {
	in := p
	if len(t.pending) > 0 {
		in = append(t.pending, p...)
		t.pending = nil
	}
	// Hold back an incomplete rune at the end (at most 3 bytes).
	cut := len(in)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(in); k++ {
		c := in[len(in)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(in[len(in)-k:]) {
				cut = len(in) - k
			}
			break
		}
	}
	t.pending = append([]byte(nil), in[cut:]...)
	t.buf = appendEscaped(t.buf[:0], in[:cut], true)
	if _, err := t.w.Write(t.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a rune still held back from an earlier Write, escaped as the
// invalid UTF-8 it is.
func (t *Writer) Flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	t.buf = appendEscaped(t.buf[:0], t.pending, true)
	t.pending = nil
	_, err := t.w.Write(t.buf)
	return err
}
