// Package seconds converts between time.Duration and seconds: exact decimal
// JSON numbers (a Policy's knobs) and float64 seconds (recorded measures and
// limits).
package seconds

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"
)

// Format writes d as exact decimal seconds: 1.5, 0.000000001,
// 9223372036.854775807.
func Format(d time.Duration) []byte {
	neg := d < 0
	u := uint64(d) // two's complement: -d below, without overflow at MinInt64
	if neg {
		u = -u
	}
	b := strconv.AppendUint(nil, u/1e9, 10)
	if frac := u % 1e9; frac != 0 {
		f := strconv.AppendUint(nil, 1e9+frac, 10)[1:] // nine digits, leading zeros kept
		b = append(append(b, '.'), bytes.TrimRight(f, "0")...)
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return b
}

// Parse reads s, the text of a JSON number of seconds ("" and "null" are 0),
// exactly into a duration. When s is not a JSON number, not a whole number
// of nanoseconds or does not fit a time.Duration, why says so.
func Parse(s string) (d time.Duration, why string) {
	if s == "" || s == "null" {
		return 0, ""
	}
	if c := s[0]; c != '-' && (c < '0' || c > '9') {
		return 0, "is not a JSON number of seconds (write 10 or 1.5, unquoted)"
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	ip, fp, _ := strings.Cut(mant, ".")
	e := 0
	if exp != "" {
		// No document has 10^15 digits to make up for a larger exponent.
		x, err := strconv.ParseInt(exp, 10, 64)
		switch {
		case (err != nil || x < -1e15) && strings.HasPrefix(exp, "-"):
			e = -1e15
		case err != nil || x > 1e15:
			e = 1e15
		default:
			e = int(x)
		}
	}
	digits := strings.TrimLeft(ip+fp, "0")
	if digits == "" {
		return 0, ""
	}
	// The value is digits * 10^scale nanoseconds.
	scale := e - len(fp) + 9
	digits, trailing := strings.TrimRight(digits, "0"), len(digits)-len(strings.TrimRight(digits, "0"))
	scale += trailing
	if scale < 0 {
		return 0, "is not a whole number of nanoseconds"
	}
	const tooLong = "does not fit a duration (at most about 292 years)"
	if len(digits)+scale > 19 {
		return 0, tooLong
	}
	u, err := strconv.ParseUint(digits+strings.Repeat("0", scale), 10, 64)
	if err != nil || u > math.MaxInt64 {
		return 0, tooLong
	}
	if neg {
		return -time.Duration(u), ""
	}
	return time.Duration(u), ""
}

// FromFloat is the duration s float64 seconds stand for, to the nearest
// nanosecond.
func FromFloat(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// Slack is how far a limit recorded as s float64 seconds (Duration.Seconds)
// may be from the duration it was: none under 2^51 ns, whose every
// nanosecond float64 seconds hold; above, two units in the last place of s.
func Slack(s float64) time.Duration {
	if s*float64(time.Second) < 1<<51 {
		return 0
	}
	return 2 * time.Duration(math.Ceil((math.Nextafter(s, math.Inf(1))-s)*float64(time.Second)))
}
