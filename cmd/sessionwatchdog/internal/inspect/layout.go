package inspect

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Label layout. The chart's event labels and line labels sit in bands of
// rows of their own, and each label is put, greedily and in a fixed order,
// in the first row (from the top) where its box keeps labelGap clear of
// every label already there; a label with no room in any row is left off
// the chart (its marker keeps its hover title and its table row). So no two
// label boxes ever meet, whatever the log holds.
//
// A box's width is exact, not estimated: each label is drawn with
// textLength = its characters times labelAdvance, which makes the browser
// fit the glyphs to that width, and chartText keeps only characters every
// monospace font draws at an ordinary height.
const (
	labelFont    = 10.0                    // px, the font size of marker, line and tick labels
	labelAdvance = labelFont * monoAdvance // width per character, forced by textLength
	labelRowH    = 14.0                    // a row: the font's ascent and descent (about 1.2em) and air
	labelGap     = 6.0                     // the least space between two labels in a row
	// labelBaseline is a label's baseline below its row's top.
	labelBaseline = 10.0
	// markerLabelRows and lineLabelRows bound the two bands.
	markerLabelRows = 6
	lineLabelRows   = 3
)

// labelWidth is the width a label is drawn at (its textLength).
func labelWidth(s string) float64 {
	return round2(float64(utf8.RuneCountInString(s)) * labelAdvance)
}

// chartText returns s for a chart label: shortened to at most max
// characters, with an ellipsis when cut, and each character outside Latin,
// Greek and Cyrillic, or any control, format or combining character (which
// a font may draw wider or taller than a row, or which reorder or stack
// glyphs), replaced by "?". The full value stays in the marker's title and
// the table.
func chartText(s string, max int) string {
	if max < 1 {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			// One more character: s is longer than max.
			out := []rune(b.String())
			return string(out[:max-1]) + "…"
		}
		if r >= 0x0530 || !unicode.IsPrint(r) || unicode.Is(unicode.M, r) {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// span1 is a closed interval of x.
type span1 struct{ lo, hi float64 }

// rowPlacer lays labels out in rows between minX and maxX. The zero value
// places nothing (it has no rows); it is not safe for concurrent use.
type rowPlacer struct {
	minX, maxX float64
	maxRows    int
	rows       [][]span1
}

// place puts a label of width w at the first of the candidate left edges
// (each moved inside minX..maxX) in the first row where it keeps labelGap
// clear of every label placed before, trying every candidate of a row
// before the next row. It returns the left edge and row, or ok false when
// no row has room or w does not fit between minX and maxX at all.
func (p *rowPlacer) place(w float64, lefts ...float64) (left float64, row int, ok bool) {
	if !(w > 0) || w > p.maxX-p.minX || math.IsInf(w, 0) {
		return 0, 0, false
	}
	for r := 0; r < p.maxRows; r++ {
		if r == len(p.rows) {
			p.rows = append(p.rows, nil)
		}
		for _, l := range lefts {
			if math.IsNaN(l) {
				continue
			}
			l = round2(math.Max(p.minX, math.Min(p.maxX-w, l)))
			if p.free(r, l, l+w) {
				p.rows[r] = append(p.rows[r], span1{l, l + w})
				return l, r, true
			}
		}
	}
	return 0, 0, false
}

func (p *rowPlacer) free(r int, lo, hi float64) bool {
	for _, s := range p.rows[r] {
		if lo < s.hi+labelGap && s.lo < hi+labelGap {
			return false
		}
	}
	return true
}

// used is how many rows hold a label.
func (p *rowPlacer) used() int {
	n := 0
	for i, r := range p.rows {
		if len(r) > 0 {
			n = i + 1
		}
	}
	return n
}

// bandHeight is the height of a band of the used rows: none when no label
// was placed, else the rows and 2 units above and below.
func (p *rowPlacer) bandHeight() float64 {
	if u := p.used(); u > 0 {
		return float64(u)*labelRowH + 4
	}
	return 0
}
