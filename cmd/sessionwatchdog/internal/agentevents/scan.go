package agentevents

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
)

// The scanner reads one line of JSON incrementally, in pieces of any size,
// without holding the line: it keeps the containers open around the
// current value (at most maxDepth, each with its current key, at most
// maxKey bytes) and the first maxValue bytes of the current scalar, and
// reports to a sink every scalar and every container that ends, with its
// path. String contents are skipped with bytes.IndexByte. Its memory is
// bounded whatever the line's length: about maxDepth*(maxKey+16) +
// maxValue bytes.
//
// It accepts one JSON object a line and reports anything else (another
// value at the top, a syntax error, bytes after the object, a line cut
// short) as not an object, at End. It does not check what a parser needs
// no trust in: the validity of escapes, UTF-8, numbers' exact grammar.

const (
	maxDepth = 256 // deeper nesting is not an event line of any format
	maxKey   = 48  // a key longer than this matches no path
	maxValue = 512 // a scalar is kept up to this many bytes
	// maxCaptureDepth: scalars deeper than this are not kept (no format
	// reads them), only skipped.
	maxCaptureDepth = 6
)

// state is what the scanner expects next.
type state uint8

const (
	sTop          state = iota // the line's first value: an object
	sValue                     // a value
	sValueOrClose              // a value or ']' (after '[')
	sKeyOrClose                // a key or '}' (after '{')
	sKey                       // a key (after ',' in an object)
	sColon                     // ':' after a key
	sCommaOrClose              // ',' or the container's end, after a value
	sString                    // inside a string (a key or a value)
	sScalar                    // inside a number or a literal
	sEnd                       // the object ended: only white space may follow
)

// frame is an open container.
type frame struct {
	obj  bool
	klen int // the current key's length in key; -1: too long
	key  [maxKey]byte
}

// sink receives what the scanner reads.
type sink interface {
	// want reports whether the scalar beginning at the scanner's path is
	// to be kept and reported (value); the others are only skipped.
	want(s *scanner) bool
	// value reports a scalar at the scanner's path: v its raw bytes (a
	// string's without its quotes, escapes as written), str whether it is a
	// string, over whether it was longer than v.
	value(s *scanner, v []byte, str, over bool)
	// closed reports that a container ended; the scanner's path names it.
	closed(s *scanner, obj bool)
}

type scanner struct {
	sink    sink
	stack   []frame
	st      state
	bad     bool // not one JSON object
	blank   bool // nothing but white space so far
	isKey   bool // the string in progress is a key
	esc     bool // the string's previous byte was an escaping backslash
	keep    bool // the value in progress is kept (in val)
	fresh   bool // the string in progress has just begun: nothing of it read
	val     []byte
	valOver bool
}

func newScanner(k sink) *scanner {
	return &scanner{sink: k, stack: make([]frame, 0, 16), val: make([]byte, 0, maxValue), blank: true}
}

// reset makes the scanner ready for a new line.
func (s *scanner) reset() {
	s.stack = s.stack[:0]
	s.st, s.bad, s.blank, s.esc, s.isKey, s.keep = sTop, false, true, false, false, false
	s.val, s.valOver = s.val[:0], false
}

// object reports whether the line read so far is one whole JSON object.
func (s *scanner) object() bool { return !s.bad && s.st == sEnd }

// depth is how many containers are open.
func (s *scanner) depth() int { return len(s.stack) }

// key is the key of the i-th open container (outermost 0): its current
// key for an object, "[]" for an array, "" for a key too long.
func (s *scanner) key(i int) []byte {
	f := &s.stack[i]
	switch {
	case !f.obj:
		return brackets
	case f.klen < 0:
		return nil
	}
	return f.key[:f.klen]
}

var brackets = []byte("[]")

// at reports whether the path is keys: the keys of the open containers,
// outermost first ("[]" for an array).
func (s *scanner) at(keys ...string) bool {
	if len(keys) != len(s.stack) {
		return false
	}
	for i, k := range keys {
		if string(s.key(i)) != k {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// write reads the next piece of the line.
func (s *scanner) write(p []byte) {
	i := 0
	for i < len(p) && !s.bad {
		switch s.st {
		case sString:
			i += s.str(p[i:])
			continue
		case sScalar:
			j := i
			for j < len(p) && isScalarByte(p[j]) {
				j++
			}
			s.add(p[i:j])
			i = j
			if j < len(p) {
				s.endScalar()
			}
			continue
		}
		c := p[i]
		i++
		if isSpace(c) {
			continue
		}
		s.blank = false
		switch s.st {
		case sTop:
			if c != '{' {
				s.bad = true
				break
			}
			s.push(true)
		case sValue, sValueOrClose:
			if c == ']' && s.st == sValueOrClose {
				s.pop()
				break
			}
			s.beginValue(c)
		case sKeyOrClose, sKey:
			if c == '}' && s.st == sKeyOrClose {
				s.pop()
				break
			}
			if c != '"' {
				s.bad = true
				break
			}
			s.isKey, s.keep, s.esc, s.fresh = true, true, false, true
			s.val, s.valOver = s.val[:0], false
			s.st = sString
		case sColon:
			if c != ':' {
				s.bad = true
				break
			}
			s.st = sValue
		case sCommaOrClose:
			obj := s.stack[len(s.stack)-1].obj
			switch {
			case c == ',' && obj:
				s.st = sKey
			case c == ',':
				s.st = sValue
			case c == '}' && obj, c == ']' && !obj:
				s.pop()
			default:
				s.bad = true
			}
		default: // sEnd: bytes after the object
			s.bad = true
		}
	}
}

// end ends the line: a scalar at its very end cannot be pending in a
// valid object, so it is only a syntax error.
func (s *scanner) end() {
	if s.st == sScalar {
		s.bad = true
	}
}

// special returns the index of p's first '"' or '\\', or -1: eight bytes
// at a time (SWAR: a byte equal to c is a zero byte of x^c; the lowest
// high bit of (v-0x01..)&^v marks the first zero byte exactly).
func special(p []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		a, b := x^(lo*'"'), x^(lo*'\\')
		if m := ((a - lo) &^ a) | ((b-lo)&^b)&hi; m&hi != 0 {
			return i + bits.TrailingZeros64(m&hi)>>3
		}
	}
	for ; i < len(p); i++ {
		if p[i] == '"' || p[i] == '\\' {
			return i
		}
	}
	return -1
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E'
}

func (s *scanner) push(obj bool) {
	if len(s.stack) == maxDepth {
		s.bad = true
		return
	}
	s.stack = append(s.stack, frame{obj: obj})
	if obj {
		s.st = sKeyOrClose
	} else {
		s.st = sValueOrClose
	}
}

func (s *scanner) pop() {
	obj := s.stack[len(s.stack)-1].obj
	s.stack = s.stack[:len(s.stack)-1]
	s.sink.closed(s, obj)
	s.afterValue()
}

func (s *scanner) afterValue() {
	if len(s.stack) == 0 {
		s.st = sEnd
	} else {
		s.st = sCommaOrClose
	}
}

func (s *scanner) beginValue(c byte) {
	switch {
	case c == '{':
		s.push(true)
	case c == '[':
		s.push(false)
	case c == '"':
		s.isKey, s.keep, s.esc, s.fresh = false, len(s.stack) <= maxCaptureDepth && s.sink.want(s), false, true
		s.val, s.valOver = s.val[:0], false
		s.st = sString
	case c == '-' || c >= '0' && c <= '9' || c == 't' || c == 'f' || c == 'n':
		s.keep = len(s.stack) <= maxCaptureDepth && s.sink.want(s)
		s.val, s.valOver = append(s.val[:0], c), false
		s.st = sScalar
	default:
		s.bad = true
	}
}

// add keeps b as part of the value in progress, up to its bound (a
// scalar that is not kept: its first bytes, enough to check a literal).
func (s *scanner) add(b []byte) {
	if s.valOver {
		return
	}
	limit := maxValue
	switch {
	case s.isKey:
		limit = maxKey
	case !s.keep && s.st == sString:
		return
	case !s.keep:
		limit = 6
	}
	if room := limit - len(s.val); len(b) > room {
		s.val, s.valOver = append(s.val, b[:room]...), true
		return
	}
	s.val = append(s.val, b...)
}

// str reads the string in progress from p and returns how many bytes of p
// it consumed: up to its closing quote, or all of p.
func (s *scanner) str(p []byte) int {
	if s.fresh { // most strings are short and plain: read 8 bytes at a time
		s.fresh = false
		if k := special(p[:min(len(p), 64)]); k >= 0 && p[k] == '"' {
			s.short(p[:k])
			return k + 1
		}
	}
	i, q := 0, -1 // q: the next '"' at or after i (len(p): none)
	for i < len(p) {
		if s.esc {
			s.add(p[i : i+1])
			i++
			s.esc = false
			continue
		}
		if q < i {
			if q = bytes.IndexByte(p[i:], '"'); q >= 0 {
				q += i
			} else {
				q = len(p)
			}
		}
		b := bytes.IndexByte(p[i:q], '\\')
		if b < 0 {
			s.add(p[i:q])
			if q == len(p) {
				return q
			}
			s.endString()
			return q + 1
		}
		s.add(p[i : i+b+1])
		i += b + 1
		s.esc = true
	}
	return i
}

// short ends a string read whole from one piece, b its bytes (at most 64,
// no escape), without copying it into val first.
func (s *scanner) short(b []byte) {
	if s.isKey {
		f := &s.stack[len(s.stack)-1]
		f.klen = -1
		if len(b) <= maxKey {
			f.klen = copy(f.key[:], b)
		}
		s.st = sColon
		return
	}
	if s.keep {
		s.sink.value(s, b, true, false)
	}
	s.afterValue()
}

func (s *scanner) endString() {
	if s.isKey {
		f := &s.stack[len(s.stack)-1]
		f.klen = -1
		if !s.valOver {
			f.klen = copy(f.key[:], s.val)
		}
		s.st = sColon
		return
	}
	if s.keep {
		s.sink.value(s, s.val, true, s.valOver)
	}
	s.afterValue()
}

func (s *scanner) endScalar() {
	v := s.val
	switch v[0] {
	case 't', 'f', 'n':
		if s.valOver || string(v) != "true" && string(v) != "false" && string(v) != "null" {
			s.bad = true
			return
		}
	default:
		for _, c := range v {
			if c >= 'a' && c <= 'z' && c != 'e' {
				s.bad = true
				return
			}
		}
	}
	if s.keep {
		s.sink.value(s, v, false, s.valOver)
	}
	s.afterValue()
}

// appendText appends to dst the text a kept string value holds: its
// escapes decoded.
func appendText(dst, v []byte) []byte {
	if bytes.IndexByte(v, '\\') < 0 {
		return append(dst, v...)
	}
	return append(dst, text(v)...)
}

// text is the string a kept string value holds: its escapes decoded.
func text(v []byte) string {
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v)
	}
	var out string
	q := make([]byte, 0, len(v)+2)
	q = append(append(append(q, '"'), v...), '"')
	if json.Unmarshal(q, &out) != nil {
		return string(v) // cut inside an escape: keep it raw
	}
	return out
}
