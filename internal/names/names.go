// Package names checks the ids, names and free text that the Watchdog
// accepts from outside, so that every store keeps them unchanged.
package names

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxLen is the longest session id, event id, channel, rule, phase or
// handler name, in bytes, that the Watchdog and its stores accept: every
// bundled store keeps it (PostgreSQL's index holds about 2.7 kB).
const MaxLen = 1024

// Check reports what makes s unusable as an id or a name (what says
// which): empty, longer than MaxLen bytes, not valid UTF-8, or holding a
// NUL byte, none of which every store can keep. The caller wraps it in its
// sentinel.
func Check(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > MaxLen:
		return fmt.Errorf("%s %s is %d bytes long, at most %d", what, Quote(s), len(s), MaxLen)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %s holds a NUL byte", what, Quote(s))
	}
	return CheckText(what, s)
}

// CheckText reports free text (a reason, an error) that JSON cannot carry
// unchanged: invalid UTF-8, which encoding turns into U+FFFD. (A NUL is
// fine: JSON escapes it, and the bundled stores keep an event's JSON as
// JSON text.)
func CheckText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s %s is not valid UTF-8", what, Quote(s))
	}
	return nil
}

// Quote quotes s for an error message, cut after 64 bytes.
func Quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// MaxText is where Clean cuts free text.
const MaxText = 4096

// Clean makes free text from user code (an action's error, a step's name,
// a program's name) storable: invalid UTF-8 becomes U+FFFD, and text longer
// than MaxText bytes is cut there, ending in "...".
func Clean(s string) string {
	if len(s) <= MaxText && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxText {
		cut := MaxText - 3
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
