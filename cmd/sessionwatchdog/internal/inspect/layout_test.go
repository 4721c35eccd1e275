package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sessionwatchdog/watchdog"
)

// box is a text's extent in chart units.
type box struct {
	what                     string
	left, right, top, bottom float64
}

func (a box) meets(b box) bool {
	return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom
}

// textBoxes lists the box of every text the chart draws: tick labels, lane
// names, marker labels and line labels.
func textBoxes(h htmlSession) []box {
	var out []box
	row := func(what string, left, w, baseline float64) box {
		top := baseline - labelBaseline
		return box{what, left, left + w, top, top + labelRowH}
	}
	for _, t := range h.Ticks {
		if t.Label != "" {
			out = append(out, row("tick "+t.Label, t.LabelX-t.LabelW/2, t.LabelW, 13))
		}
	}
	for _, l := range h.Lanes {
		// 11px, from x=6 on the lane's middle + 4.
		w := float64(utf8.RuneCountInString(l.Name)) * 11 * monoAdvance
		out = append(out, box{"lane " + l.Name, 6, 6 + w, l.Mid + 4 - 11, l.Mid + 4 + 4})
	}
	for _, m := range h.Markers {
		if m.Label != "" {
			out = append(out, row("marker "+m.Label, m.LabelX, m.LabelW, m.LabelY))
		}
	}
	for _, l := range h.Lines {
		if l.Label != "" {
			out = append(out, row("line "+l.Label, l.LabelX, l.LabelW, l.LabelY))
		}
	}
	return out
}

// crowdedEvents is a session whose events crowd: a decision, cancel and
// resume within 200ms (the "DECISION act" over "resume" case), then n
// events at one instant of every labelled kind, one of them with a kind of
// 5,000 characters and one of hostile Unicode, and windows whose budgets
// end 10ms apart beside the session ceiling.
func crowdedEvents(n int) []watchdog.Event {
	t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	p := watchdog.Policy{WallClock: 10 * time.Second, SessionCeiling: 30 * time.Second}
	var evs []watchdog.Event
	add := func(e watchdog.Event) {
		e.ID, e.AggregateID, e.SessionStartedAt = fmt.Sprint(len(evs)+1), "crowd", t0
		evs = append(evs, e)
	}
	add(watchdog.Event{Kind: watchdog.KindStart, Window: 1, WindowStartedAt: t0, OccurredAt: t0, ConfiguredBudgetSeconds: 10, Policy: &p})
	at := t0.Add(10 * time.Second)
	add(watchdog.Event{Kind: watchdog.KindDecision, Mode: watchdog.ModeAct, Rule: "wall_clock", Window: 1, WindowStartedAt: t0, OccurredAt: at})
	add(watchdog.Event{Kind: watchdog.KindCancel, Window: 1, WindowStartedAt: t0, OccurredAt: at.Add(time.Millisecond)})
	for w := 2; w <= 6; w++ {
		start := at.Add(200*time.Millisecond + time.Duration(w)*10*time.Millisecond)
		add(watchdog.Event{Kind: watchdog.KindResume, Window: w, WindowStartedAt: start, OccurredAt: start, ConfiguredBudgetSeconds: 10, Policy: &p})
	}
	same := t0.Add(20 * time.Second)
	kinds := []string{watchdog.KindDecision, watchdog.KindCancel, watchdog.KindRetry, watchdog.KindActionFailed,
		watchdog.KindHandlerDeadline, watchdog.KindWaitTimeout, watchdog.KindSuperseded, "runtime.watchdog.future"}
	for i := 0; i < n; i++ {
		add(watchdog.Event{Kind: kinds[i%len(kinds)], Mode: watchdog.ModeShadow, Layer: "tool", Window: 6, OccurredAt: same})
	}
	add(watchdog.Event{Kind: "runtime." + strings.Repeat("W", 5000), Window: 6, OccurredAt: same})
	add(watchdog.Event{Kind: "runtime.\u202e\u0301\u0301\u0301\u0301x\u200b\u00adＷ😀﷽\U00012219\u0000\u001b[2J\xff", Window: 6, OccurredAt: same})
	add(watchdog.Event{Kind: watchdog.KindStop, Window: 6, OccurredAt: t0.Add(35 * time.Second)})
	return evs
}

// No two texts of a crowded chart meet, none leaves the chart, and every
// labelled event either has its label or is counted under the chart.
func TestChartLabelsNeverOverlap(t *testing.T) {
	for _, n := range []int{0, 1, 7, 40, 500} {
		t.Run(fmt.Sprint(n, " at one instant"), func(t *testing.T) {
			r := Build(crowdedEvents(n), Filter{})
			h := chartOf(0, r.Sessions[0])
			boxes := textBoxes(h)
			for i, a := range boxes {
				if a.left < 0 || a.right > h.Width || a.top < 0 || a.bottom > h.Height {
					t.Errorf("%.40q at %g..%g x %g..%g leaves the %gx%g chart", a.what, a.left, a.right, a.top, a.bottom, h.Width, h.Height)
				}
				for _, b := range boxes[:i] {
					if a.meets(b) {
						t.Errorf("%.40q (%g..%g, %g..%g) meets %.40q (%g..%g, %g..%g)", a.what, a.left, a.right, a.top, a.bottom, b.what, b.left, b.right, b.top, b.bottom)
					}
				}
			}
			labelled, drawn := 0, 0
			for _, m := range h.Markers {
				if m.Label != "" {
					drawn++
					if m.LabelX > m.X || m.X > m.LabelX+m.LabelW || m.LeaderY1 >= m.LeaderY2 {
						t.Errorf("the leader of %q at x=%g does not run down to its label at %g..%g", m.Label, m.X, m.LabelX, m.LabelX+m.LabelW)
					}
				}
			}
			for _, en := range r.Sessions[0].Timeline {
				if en.Event.Kind != watchdog.KindVerdict {
					labelled++
				}
			}
			lines := 0
			for _, l := range h.Lines {
				if l.Label != "" {
					lines++
				}
			}
			if drawn+lines+h.Unplaced != labelled+len(h.Lines) {
				t.Errorf("%d marker and %d line labels drawn and %d counted as left off, want %d in all", drawn, lines, h.Unplaced, labelled+len(h.Lines))
			}
			for _, want := range []string{"DECISION act", "cancel", "resume", "start", "stop"} {
				if !hasMarkerLabel(h, want) {
					t.Errorf("no %q label on the chart", want)
				}
			}
			if n == 500 && (h.Unplaced == 0 || h.Height > 400) {
				t.Errorf("500 labels at one instant: %d left off, chart %g high; want some left off and a bounded chart", h.Unplaced, h.Height)
			}
		})
	}
}

// Whatever a log holds, no two texts of a chart meet and none leaves it.
func FuzzChartLabelsNeverOverlap(f *testing.F) {
	for _, evs := range [][]watchdog.Event{crowdedEvents(12), load(f, "sessions.jsonl"), load(f, "actions.jsonl")} {
		b, err := json.Marshal(evs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var evs []watchdog.Event
		if json.Unmarshal(b, &evs) != nil {
			return
		}
		for i, s := range Build(evs, Filter{}).Sessions {
			h := chartOf(i, s)
			boxes := textBoxes(h)
			for j, a := range boxes {
				if a.left < 0 || a.right > h.Width || a.top < 0 || a.bottom > h.Height {
					t.Fatalf("%.40q at %g..%g x %g..%g leaves the %gx%g chart", a.what, a.left, a.right, a.top, a.bottom, h.Width, h.Height)
				}
				for _, o := range boxes[:j] {
					if a.meets(o) {
						t.Fatalf("%.40q (%g..%g, %g..%g) meets %.40q (%g..%g, %g..%g)", a.what, a.left, a.right, a.top, a.bottom, o.what, o.left, o.right, o.top, o.bottom)
					}
				}
			}
		}
	})
}

func hasMarkerLabel(h htmlSession, label string) bool {
	for _, m := range h.Markers {
		if m.Label == label {
			return true
		}
	}
	return false
}

// The same log gives the same page, byte for byte.
func TestChartLayoutIsDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := WriteHTML(&a, Build(crowdedEvents(300), Filter{}), "x"); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&b, Build(crowdedEvents(300), Filter{}), "x"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two renders of one log differ")
	}
	if !strings.Contains(a.String(), "labels left off the chart for lack of room") {
		t.Error("the page does not say that labels were left off")
	}
}

// Whatever labels a placer is given (hundreds at one anchor, anchors
// outside the chart or not numbers, widths of none, one character or more
// than the chart), the boxes it places keep labelGap apart in each row and
// stay inside its range and rows, and it places the same way twice.
func TestRowPlacerKeepsBoxesApart(t *testing.T) {
	type in struct{ w, anchor float64 }
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []in
	for i := 0; i < 400; i++ {
		ins = append(ins, in{float64(1+i%30) * labelAdvance, 500}) // one instant
	}
	for i := 0; i < 400; i++ {
		ins = append(ins, in{float64(1+rng.IntN(24)) * labelAdvance, rng.Float64()*1200 - 100})
	}
	ins = append(ins, in{0, 300}, in{-5, 300}, in{2000, 300}, in{math.Inf(1), 300}, in{math.NaN(), 300},
		in{50, math.NaN()}, in{50, math.Inf(-1)}, in{50, math.Inf(1)}, in{labelAdvance, 0}, in{labelAdvance, 1000})

	type out struct {
		left float64
		row  int
		ok   bool
	}
	lay := func() []out {
		p := rowPlacer{minX: 2, maxX: 998, maxRows: markerLabelRows}
		var res []out
		for _, x := range ins {
			l, r, ok := p.place(x.w, x.anchor-x.w/2, x.anchor-4, x.anchor-x.w+4)
			res = append(res, out{l, r, ok})
		}
		return res
	}
	first, second := lay(), lay()
	placed := 0
	rows := map[int][]int{}
	for i, o := range first {
		if o != second[i] {
			t.Fatalf("label %d placed at %+v, then at %+v", i, o, second[i])
		}
		if !o.ok {
			continue
		}
		placed++
		w := ins[i].w
		if o.row < 0 || o.row >= markerLabelRows || o.left < 2 || o.left+w > 998 || !(w > 0) {
			t.Errorf("label %d (width %g) placed at %g in row %d, outside 2..998 or rows 0..%d", i, w, o.left, o.row, markerLabelRows-1)
		}
		for _, j := range rows[o.row] {
			if a, b := first[j].left, ins[j].w; o.left < a+b+labelGap && a < o.left+w+labelGap {
				t.Errorf("labels %d (%g+%g) and %d (%g+%g) closer than %g in row %d", i, o.left, w, j, a, b, labelGap, o.row)
			}
		}
		rows[o.row] = append(rows[o.row], i)
	}
	// At one instant each row takes one label: the first markerLabelRows.
	for i := 0; i < 400; i++ {
		if first[i].ok != (i < markerLabelRows) {
			t.Errorf("label %d at the shared instant: placed %v", i, first[i].ok)
		}
	}
	t.Logf("%d of %d labels placed", placed, len(ins))
}

// A chart label keeps only characters of known width and height: controls,
// bidi and format characters, combining marks, wide and tall scripts and
// invalid UTF-8 become "?", and it is cut at max characters with an
// ellipsis.
func TestChartTextKeepsPlainCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"DECISION act":                  "DECISION act",
		"café Ωμέγα Жук":                "café Ωμέγα Жук",
		"a\u202eb\u0301c\u200bd\u00ad":  "a?b?c?d?",
		"Ｗ😀﷽\U00012219":                 "????",
		"\x00\x1b[2J\xff":               "??[2J?",
		strings.Repeat("x", 30):         strings.Repeat("x", 23) + "…",
		strings.Repeat("界", 30):         strings.Repeat("?", 23) + "…",
		strings.Repeat("x", 24):         strings.Repeat("x", 24),
		"":                              "",
		"<script>alert(1)</script>&amp": "<script>alert(1)</scrip…", // escaped by the template
	} {
		if got := chartText(in, markerLabelMax); got != want {
			t.Errorf("chartText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := chartText("abc", 0); got != "" {
		t.Errorf("chartText with max 0 = %q", got)
	}
}
