package inspect

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sessionwatchdog/watchdog"
)

// Chart geometry, in SVG user units.
const (
	chartWidth  = 1000.0
	gutterLeft  = 120.0
	gutterRight = 24.0
	axisHeight  = 26.0
	laneHeight  = 30.0
)

// Longest visible texts, in characters with the ellipsis, so that whatever
// a log names never leaves its place on the page: a lane's name fits the
// gutter (11px monospace from x=6), a marker's label stays about two marker
// spacings wide (10px monospace), and a longer table label may wrap. The
// full value is always on the page: in the SVG text's <title> (its hover
// text) and, wrapped, in the table.
const (
	laneNameMax    = 16
	markerLabelMax = 24
	tableLabelMax  = 24
	// monoAdvance is a monospace glyph's advance per pixel of font size,
	// a little over the usual 0.6 so that estimates err wide.
	monoAdvance = 0.62
)

// shorten returns s cut to at most max characters, ending in an ellipsis
// when it was cut, and whether it was.
func shorten(s string, max int) (string, bool) {
	if utf8.RuneCountInString(s) <= max {
		return s, false
	}
	r := []rune(s)
	return string(r[:max-1]) + "…", true
}

// WriteHTML writes r as one self-contained HTML page: no network access and
// no external assets, only inline CSS, SVG and a few lines of JavaScript.
// Each session gets a chart (a lane per evidence channel with its evidence
// marks, the idle window and the wall-clock budget and ceilings as bands,
// verdicts, decisions and outcomes as markers) and its timeline as a table.
// No two texts of a chart overlap, whatever the log holds: labels are laid
// out in rows (layout.go), and those without room are left off the chart
// and counted under it (every event keeps its marker's hover title and its
// table row). The same report always gives the same bytes. source names
// the log in the page's title.
func WriteHTML(w io.Writer, r Report, source string) error {
	page := htmlPage{Source: source}
	for i, s := range r.Sessions {
		page.Sessions = append(page.Sessions, chartOf(i, s))
		page.Events += len(s.Timeline)
	}
	return pageTemplate().Execute(w, page)
}

type htmlPage struct {
	Source   string
	Events   int
	Sessions []htmlSession
}

type htmlSession struct {
	Index    int
	ID       string
	Final    string
	Started  string
	Width    float64
	Height   float64
	Ticks    []tick
	Lanes    []lane
	Bands    []band
	Lines    []vline
	Marks    []mark
	Markers  []marker
	Rows     []row
	Channels string
	Unplaced int // marker and line labels left off the chart for lack of room
}

type tick struct {
	X      float64
	Label  string // empty when it would come too close to the tick before
	LabelX float64
	LabelW float64
}

type lane struct {
	Y, Mid float64
	Name   string // shown, shortened to fit the gutter
	Full   string // the whole name when Name is shortened
	Class  string
}

type band struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type vline struct {
	X, Y1, Y2 float64
	Class     string
	Title     string
	Label     string // empty when left off the chart for lack of room
	LabelX    float64
	LabelY    float64
	LabelW    float64
}

type mark struct {
	X, Y  float64
	Title string
}

type marker struct {
	X, Y   float64
	Shape  string // "circle", "diamond", "triangle", "square", "cross"
	Class  string
	Label  string  // drawn under the marker when non-empty, shortened
	LabelX float64 // the label's left edge
	LabelY float64 // its baseline
	LabelW float64 // its width (textLength)
	// LeaderY1 and LeaderY2 are the ends of the line from the marker down
	// to its label.
	LeaderY1, LeaderY2 float64
	Title              string
	Row                string
}

type row struct {
	ID      string
	At      string
	Offset  string
	Window  int
	Label   string
	Long    bool // Label is long: it may wrap in its cell
	Class   string
	Summary string
	Ages    string
}

// span is the chart's time domain.
type span struct{ min, max time.Time }

func (s *span) add(t time.Time) {
	if t.IsZero() {
		return
	}
	if s.min.IsZero() || t.Before(s.min) {
		s.min = t
	}
	if s.max.IsZero() || t.After(s.max) {
		s.max = t
	}
}

func chartOf(idx int, s Session) htmlSession {
	h := htmlSession{Index: idx, ID: s.ID, Final: s.Final, Started: stamp(s.StartedAt), Width: chartWidth}
	if s.StartedAt.IsZero() {
		h.Started = "unknown"
	}
	if h.Final == "" {
		h.Final = "no terminal event shown"
	}
	h.Channels = strings.Join(s.Channels, ", ")
	if h.Channels == "" {
		h.Channels = "none in the shown events"
	}

	// The time domain: every event, window start and evidence mark.
	var dom span
	for _, en := range s.Timeline {
		e := en.Event
		dom.add(e.OccurredAt)
		dom.add(e.WindowStartedAt)
		for _, ev := range e.EvidenceSummary {
			if ev.LastAt != nil {
				dom.add(*ev.LastAt)
			}
		}
	}
	total := dom.max.Sub(dom.min)
	if total <= 0 {
		total = time.Second
	}
	pad := total / 25
	t0, t1 := dom.min.Add(-pad), dom.max.Add(pad)
	plotW := chartWidth - gutterLeft - gutterRight
	x := func(t time.Time) float64 {
		f := float64(t.Sub(t0)) / float64(t1.Sub(t0))
		return round2(gutterLeft + math.Max(0, math.Min(1, f))*plotW)
	}
	inDomain := func(t time.Time) bool { return !t.Before(t0) && !t.After(t1) }

	// Marker labels: every event but a verdict gets one, in a band of rows
	// under the events lane (see layout.go), in timeline order.
	type placed struct {
		text      string
		left, row float64 // row as a number, to place it below the band's top
		ok        bool
	}
	labels := make([]placed, len(s.Timeline))
	markerRows := rowPlacer{minX: 2, maxX: chartWidth - 2, maxRows: markerLabelRows}
	for j, en := range s.Timeline {
		if en.Event.Kind == watchdog.KindVerdict {
			continue
		}
		text := chartText(en.Label, markerLabelMax)
		w, ax := labelWidth(text), x(en.Event.OccurredAt)
		// Centred under the marker, else starting or ending at it.
		if left, r, ok := markerRows.place(w, ax-w/2, ax-4, ax-w+4); ok {
			labels[j] = placed{text: text, left: left, row: float64(r), ok: true}
		} else if text != "" {
			h.Unplaced++
		}
	}
	labelBand := markerRows.bandHeight()

	// Lanes: events, budgets, then one per channel.
	names := []string{"events", "budget"}
	classes := []string{"lane-events", "lane-budget"}
	for _, c := range s.Channels {
		names = append(names, c)
		classes = append(classes, "lane-channel")
	}
	laneY := map[string]float64{}
	for i, n := range names {
		y := axisHeight + float64(i)*laneHeight
		if i > 0 {
			y += labelBand
		}
		l := lane{Y: y, Mid: y + laneHeight/2, Name: n, Class: classes[i]}
		if short, cut := shorten(n, laneNameMax); cut {
			l.Name, l.Full = short, n
		}
		h.Lanes = append(h.Lanes, l)
		laneY[n] = y
	}
	h.Height = axisHeight + float64(len(names))*laneHeight + labelBand + 8
	bottom := h.Height - 8

	// Axis ticks, labelled as offsets from the session's start.
	origin := s.StartedAt
	if origin.IsZero() {
		origin = dom.min
	}
	step := niceStep(t1.Sub(t0))
	tickOrigin := origin
	if off := t0.Sub(origin); off > 1000*step || off < -1000*step {
		tickOrigin = t0 // the session start is far away: ticks from the domain's start
	}
	first := tickOrigin.Add(time.Duration(math.Ceil(float64(t0.Sub(tickOrigin))/float64(step))) * step)
	lastTickRight := math.Inf(-1)
	for t, n := first, 0; !t.After(t1) && n < 100; t, n = t.Add(step), n+1 {
		tk := tick{X: x(t), Label: "+" + secs(t.Sub(origin).Seconds())}
		// Centred on the tick inside the chart; left off when it would
		// come too close to the label before.
		tk.LabelW = labelWidth(tk.Label)
		tk.LabelX = round2(math.Max(2+tk.LabelW/2, math.Min(chartWidth-2-tk.LabelW/2, tk.X)))
		if tk.LabelX-tk.LabelW/2 < lastTickRight+labelGap {
			tk.Label = ""
		} else {
			lastTickRight = tk.LabelX + tk.LabelW/2
		}
		h.Ticks = append(h.Ticks, tk)
	}

	// The wall-clock budget of every window, and the ceilings.
	type win struct {
		start  time.Time
		budget float64
	}
	wins := map[int]*win{}
	var winOrder []int
	ceilings := map[string]bool{}
	for _, en := range s.Timeline {
		e := en.Event
		if e.WindowStartedAt.IsZero() {
			continue
		}
		wv, ok := wins[e.Window]
		if !ok {
			wv = &win{start: e.WindowStartedAt}
			wins[e.Window] = wv
			winOrder = append(winOrder, e.Window)
		}
		wv.budget = math.Max(wv.budget, e.ConfiguredBudgetSeconds)
		if e.Policy != nil && e.Policy.SessionCeiling > 0 && !e.SessionStartedAt.IsZero() {
			at := e.SessionStartedAt.Add(e.Policy.SessionCeiling)
			key := at.String()
			if !ceilings[key] && inDomain(at) {
				ceilings[key] = true
				h.Lines = append(h.Lines, vline{X: x(at), Y1: axisHeight, Y2: bottom, Class: "ceiling",
					Title: "session ceiling " + e.Policy.SessionCeiling.String() + " (policy) at " + stamp(at), Label: "session ceiling"})
			}
		}
		if e.Rule == "session_ceiling" && e.LimitSeconds > 0 && !e.SessionStartedAt.IsZero() {
			at := e.SessionStartedAt.Add(dur(e.LimitSeconds))
			key := at.String()
			if !ceilings[key] && inDomain(at) {
				ceilings[key] = true
				h.Lines = append(h.Lines, vline{X: x(at), Y1: axisHeight, Y2: bottom, Class: "ceiling",
					Title: "session ceiling " + secs(e.LimitSeconds) + " at " + stamp(at), Label: "session ceiling"})
			}
		}
	}
	sort.Ints(winOrder)
	by := laneY["budget"]
	for _, n := range winOrder {
		wv := wins[n]
		if wv.budget <= 0 {
			continue
		}
		end := wv.start.Add(dur(wv.budget))
		h.Bands = append(h.Bands, band{X: x(wv.start), Y: by + 6, W: round2(x(end) - x(wv.start)), H: laneHeight - 12, Class: "budget",
			Title: fmt.Sprintf("window %d: wall-clock budget %s from %s", n, secs(wv.budget), stamp(wv.start))})
		if inDomain(end) {
			h.Lines = append(h.Lines, vline{X: x(end), Y1: axisHeight, Y2: bottom, Class: "deadline",
				Title: fmt.Sprintf("window %d budget ends %s", n, stamp(end)), Label: fmt.Sprintf("w%d budget", n)})
		}
	}

	// The idle window on the baseline lane: from the start of stdout's
	// silence to the idle limit, then overdue up to the latest verdict.
	if sy, ok := laneY["stdout"]; ok {
		type episode struct {
			from     time.Time
			limit    float64
			observed time.Time
		}
		var eps []*episode
		for _, en := range s.Timeline {
			e := en.Event
			if e.Rule != "idle" || e.LimitSeconds <= 0 {
				continue
			}
			from := e.OccurredAt.Add(-dur(e.MeasureSeconds)).Round(time.Millisecond)
			var ep *episode
			for _, p := range eps {
				if p.from.Equal(from) && p.limit == e.LimitSeconds {
					ep = p
				}
			}
			if ep == nil {
				ep = &episode{from: from, limit: e.LimitSeconds}
				eps = append(eps, ep)
			}
			if e.OccurredAt.After(ep.observed) {
				ep.observed = e.OccurredAt
			}
		}
		for _, ep := range eps {
			due := ep.from.Add(dur(ep.limit))
			h.Bands = append(h.Bands, band{X: x(ep.from), Y: sy + 4, W: round2(x(due) - x(ep.from)), H: laneHeight - 8, Class: "idle",
				Title: fmt.Sprintf("idle window %s: stdout silent since %s", secs(ep.limit), stamp(ep.from))})
			if ep.observed.After(due) {
				h.Bands = append(h.Bands, band{X: x(due), Y: sy + 4, W: round2(x(ep.observed) - x(due)), H: laneHeight - 8, Class: "overdue",
					Title: fmt.Sprintf("silent past the idle window, from %s to %s", stamp(due), stamp(ep.observed))})
			}
		}
	}

	// Evidence marks: every distinct last_at seen per channel.
	for _, c := range s.Channels {
		seen := map[int64]bool{}
		var ts []time.Time
		for _, en := range s.Timeline {
			for _, ev := range en.Event.EvidenceSummary {
				if ev.Channel == c && ev.LastAt != nil && !seen[ev.LastAt.UnixNano()] {
					seen[ev.LastAt.UnixNano()] = true
					ts = append(ts, *ev.LastAt)
				}
			}
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for _, t := range ts {
			h.Marks = append(h.Marks, mark{X: x(t), Y: laneY[c] + laneHeight/2, Title: c + " evidence at " + stamp(t)})
		}
	}

	// Markers and table rows.
	ey := laneY["events"] + laneHeight/2
	bandTop := laneY["events"] + laneHeight + 2
	for j, en := range s.Timeline {
		e := en.Event
		rowID := fmt.Sprintf("ev-%d-%d", idx, j)
		shape, class := markerStyle(en)
		m := marker{X: x(e.OccurredAt), Y: ey, Shape: shape, Class: class, Row: rowID,
			Title: fmt.Sprintf("%s at %s: %s", en.Label, stamp(e.OccurredAt), en.Summary)}
		if p := labels[j]; p.ok {
			top := bandTop + p.row*labelRowH
			m.Label, m.LabelX, m.LabelY, m.LabelW = p.text, p.left, top+labelBaseline, labelWidth(p.text)
			m.LeaderY1, m.LeaderY2 = ey+7, top+1
		}
		h.Markers = append(h.Markers, m)
		h.Rows = append(h.Rows, row{
			ID: rowID, At: stamp(e.OccurredAt), Offset: "+" + secs(e.OccurredAt.Sub(origin).Seconds()),
			Window: e.Window, Label: en.Label, Long: utf8.RuneCountInString(en.Label) > tableLabelMax, Class: class, Summary: en.Summary, Ages: agesOrEmpty(en),
		})
	}

	// Line labels: in a band of rows under the lanes, left to right, each
	// just right of its line, else just left of it; the line runs down to
	// its label's row.
	order := make([]int, len(h.Lines))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return h.Lines[order[a]].X < h.Lines[order[b]].X })
	lineRows := rowPlacer{minX: 2, maxX: chartWidth - 2, maxRows: lineLabelRows}
	rowOf := make([]int, len(h.Lines))
	for _, i := range order {
		l := &h.Lines[i]
		l.LabelW = labelWidth(l.Label)
		left, r, ok := lineRows.place(l.LabelW, l.X+3, l.X-3-l.LabelW)
		if !ok {
			if l.Label != "" {
				h.Unplaced++
			}
			l.Label = ""
			continue
		}
		l.LabelX, rowOf[i] = left, r
	}
	for i := range h.Lines {
		if l := &h.Lines[i]; l.Label != "" {
			top := bottom + 2 + float64(rowOf[i])*labelRowH
			l.LabelY, l.Y2 = top+labelBaseline, top+labelRowH-2
		}
	}
	h.Height += lineRows.bandHeight()
	return h
}

func agesOrEmpty(en Entry) string {
	if len(en.Ages) == 0 {
		return ""
	}
	return ages(en)
}

// markerStyle picks a marker's shape and CSS class for an entry.
func markerStyle(en Entry) (shape, class string) {
	e := en.Event
	switch e.Kind {
	case watchdog.KindStart, watchdog.KindResume:
		return "triangle", "k-start"
	case watchdog.KindVerdict:
		if e.SettleChecks > 0 {
			return "circle", "k-stale"
		}
		return "circle", "k-continue"
	case watchdog.KindDecision:
		if e.Mode == watchdog.ModeShadow {
			return "diamond", "k-shadow"
		}
		return "diamond", "k-decision"
	case watchdog.KindCancel:
		return "cross", "k-cancel"
	case watchdog.KindStop:
		return "square", "k-stop"
	case watchdog.KindSuperseded:
		return "circle", "k-superseded"
	case watchdog.KindActionFailed:
		return "square", "k-failed"
	case watchdog.KindHandlerDeadline, watchdog.KindHandlerAbandoned:
		return "diamond", "k-deadline"
	case watchdog.KindWaitTimeout:
		return "circle", "k-wait"
	case watchdog.KindAttemptCancelled, watchdog.KindRetry, watchdog.KindRecoveryBudgetExceeded:
		return "square", "k-recovery"
	case watchdog.KindCheckpoint:
		return "circle", "k-checkpoint"
	case watchdog.KindCallCompleted:
		return "triangle", "k-call"
	}
	return "diamond", "k-other"
}

// niceStep is a tick spacing of 1, 2 or 5 times a power of ten (in
// seconds or minutes and hours above a minute) giving at most ten ticks.
func niceStep(d time.Duration) time.Duration {
	steps := []time.Duration{}
	for _, base := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second} {
		steps = append(steps, base, 2*base, 5*base)
	}
	steps = append(steps, time.Minute, 2*time.Minute, 5*time.Minute, 10*time.Minute, 15*time.Minute, 30*time.Minute, time.Hour, 2*time.Hour, 6*time.Hour, 12*time.Hour, 24*time.Hour)
	for _, s := range steps {
		if d <= 10*s {
			return s
		}
	}
	return time.Duration(math.Ceil(float64(d)/float64(10*24*time.Hour))) * 24 * time.Hour
}

// dur converts seconds to a Duration, saturating instead of overflowing.
func dur(s float64) time.Duration {
	const maxSecs = float64(math.MaxInt64) / float64(time.Second)
	switch {
	case math.IsNaN(s):
		return 0
	case s > maxSecs:
		return math.MaxInt64
	case s < -maxSecs:
		return math.MinInt64
	}
	return time.Duration(s * float64(time.Second))
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// pageTemplate is parsed at its first use, not at the start of every
// sessionwatchdog process (run's start-up among them).
var pageTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"sub": func(a, b float64) float64 { return round2(a - b) },
		"add": func(a, b float64) float64 { return round2(a + b) },
		"diamond": func(x, y float64) string {
			return fmt.Sprintf("%g,%g %g,%g %g,%g %g,%g", x, y-7, x+7, y, x, y+7, x-7, y)
		},
		"triangle": func(x, y float64) string {
			return fmt.Sprintf("%g,%g %g,%g %g,%g", x, y-7, x+7, y+6, x-7, y+6)
		},
	}).Parse(pageHTML))
})

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sessionwatchdog inspect: {{.Source}}</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 16px; margin: 28px 0 2px; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
.meta { color: #5a6272; margin: 0 0 8px; overflow-wrap: anywhere; }
svg.chart { width: 100%; max-width: 1000px; height: auto; border: 1px solid #d9dde5; border-radius: 4px; background: #fbfcfe; display: block; }
.lane-label { font: 11px ui-monospace, monospace; fill: #39404d; }
.lane-sep { stroke: #e3e6ec; }
.tick line { stroke: #e8ebf0; }
.tick text { font: 10px ui-monospace, monospace; fill: #6b7382; }
.budget { fill: #dbe8fb; stroke: #9dbbe6; }
.idle { fill: #fff0c2; stroke: #e5c766; }
.overdue { fill: #fbd3cf; stroke: #e49189; }
.deadline { stroke: #3b6fc4; stroke-dasharray: 4 3; }
.ceiling { stroke: #8a2a9b; stroke-dasharray: 6 3; }
.vlabel { font: 10px ui-monospace, monospace; fill: #3b4a66; paint-order: stroke; stroke: #fbfcfe; stroke-width: 3px; stroke-linejoin: round; }
.leader { stroke: #aab2bf; stroke-width: 1; }
.mark { fill: #2f855a; }
.marker { cursor: pointer; }
.marker text { font: 10px ui-monospace, monospace; fill: #1d2330; paint-order: stroke; stroke: #fbfcfe; stroke-width: 3px; stroke-linejoin: round; }
.k-start { fill: #3b6fc4; } .k-continue { fill: #38a169; } .k-stale { fill: #dd8f1d; }
.k-decision { fill: #c53030; } .k-shadow { fill: #8a2a9b; } .k-cancel { stroke: #9b1c1c; stroke-width: 3; fill: #9b1c1c; }
.k-stop { fill: #6b7382; } .k-superseded { fill: #fff; stroke: #6b7382; stroke-width: 2; } .k-failed { fill: #ed8936; }
.k-deadline { fill: #b7791f; } .k-wait { fill: #319795; } .k-recovery { fill: #805ad5; }
.k-checkpoint { fill: #a0aec0; } .k-call { fill: #2b6cb0; }
.k-other { fill: #fff; stroke: #1d2330; stroke-width: 2; }
table { border-collapse: collapse; margin-top: 10px; width: 100%; max-width: 1000px; font-size: 12px; }
th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eceef2; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f3f5f8; white-space: nowrap; overflow-wrap: normal; }
td.mono, th.mono { font-family: ui-monospace, monospace; white-space: nowrap; }
td.mono.long { white-space: normal; }
td.ages { color: #5a6272; }
tr.hl { background: #fff6d6; }
.legend span { margin-right: 14px; white-space: nowrap; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; border-radius: 2px; }
</style>
</head>
<body data-sessions="{{len .Sessions}}" data-ready="0">
<h1>watchdog event log: {{.Source}}</h1>
<p class="meta">{{len .Sessions}} sessions, {{.Events}} events. Times are UTC; offsets are from each session's start. Click a marker to find its row.</p>
<p class="legend meta">
<span><i style="background:#3b6fc4"></i>start/resume</span>
<span><i style="background:#38a169"></i>CONTINUE (evidence)</span>
<span><i style="background:#dd8f1d"></i>stale observation</span>
<span><i style="background:#c53030"></i>decision (act)</span>
<span><i style="background:#8a2a9b"></i>decision (shadow)</span>
<span><i style="background:#9b1c1c"></i>cancel</span>
<span><i style="background:#6b7382"></i>stop</span>
<span><i style="background:#ed8936"></i>action failed</span>
<span><i style="background:#b7791f"></i>deadline overrun</span>
<span><i style="background:#319795"></i>wait timeout</span>
<span><i style="background:#805ad5"></i>phase retry</span>
<span><i style="background:#a0aec0"></i>checkpoint</span>
<span><i style="background:#2b6cb0"></i>tool call completed</span>
<span><i style="background:#fff;border:2px solid #1d2330"></i>other kind</span>
<span><i style="background:#dbe8fb;border:1px solid #9dbbe6"></i>wall-clock budget</span>
<span><i style="background:#fff0c2;border:1px solid #e5c766"></i>idle window</span>
<span><i style="background:#fbd3cf;border:1px solid #e49189"></i>silent past it</span>
<span><i style="background:#2f855a;border-radius:6px"></i>channel evidence</span>
</p>
{{if not .Sessions}}<p id="empty">No events match.</p>{{end}}
{{range $s := .Sessions}}
<section class="session" id="session-{{$s.Index}}" data-session="{{$s.ID}}">
<h2>session {{$s.ID}}</h2>
<p class="meta">started {{$s.Started}}; channels: {{$s.Channels}}; ended {{$s.Final}}</p>
<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {{$s.Width}} {{$s.Height}}" role="img" aria-label="timeline of session {{$s.ID}}">
{{range $s.Ticks}}<g class="tick"><line x1="{{.X}}" y1="18" x2="{{.X}}" y2="{{sub $s.Height 8}}"></line>{{if .Label}}<text x="{{.LabelX}}" y="13" text-anchor="middle" textLength="{{.LabelW}}" lengthAdjust="spacingAndGlyphs">{{.Label}}</text>{{end}}</g>
{{end}}{{range $s.Lanes}}<line class="lane-sep" x1="0" y1="{{.Y}}" x2="{{$s.Width}}" y2="{{.Y}}"></line><text class="lane-label {{.Class}}" x="6" y="{{add .Mid 4}}">{{if .Full}}<title>{{.Full}}</title>{{end}}{{.Name}}</text>
{{end}}{{range $s.Bands}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" rx="2"><title>{{.Title}}</title></rect>
{{end}}{{range $s.Lines}}<g><line class="{{.Class}}" x1="{{.X}}" y1="{{.Y1}}" x2="{{.X}}" y2="{{.Y2}}"></line>{{if .Label}}<text class="vlabel" x="{{.LabelX}}" y="{{.LabelY}}" textLength="{{.LabelW}}" lengthAdjust="spacingAndGlyphs">{{.Label}}</text>{{end}}<title>{{.Title}}</title></g>
{{end}}{{range $s.Marks}}<circle class="mark" cx="{{.X}}" cy="{{.Y}}" r="4"><title>{{.Title}}</title></circle>
{{end}}{{range $s.Markers}}{{if .Label}}<line class="leader" x1="{{.X}}" y1="{{.LeaderY1}}" x2="{{.X}}" y2="{{.LeaderY2}}"></line>
{{end}}{{end}}{{range $s.Markers}}<g class="marker {{.Class}}" data-row="{{.Row}}"><title>{{.Title}}</title>{{if eq .Shape "circle"}}<circle cx="{{.X}}" cy="{{.Y}}" r="6"></circle>{{else if eq .Shape "diamond"}}<polygon points="{{diamond .X .Y}}"></polygon>{{else if eq .Shape "triangle"}}<polygon points="{{triangle .X .Y}}"></polygon>{{else if eq .Shape "square"}}<rect x="{{sub .X 6}}" y="{{sub .Y 6}}" width="12" height="12"></rect>{{else}}<path d="M{{sub .X 6}},{{sub .Y 6}} L{{add .X 6}},{{add .Y 6}} M{{add .X 6}},{{sub .Y 6}} L{{sub .X 6}},{{add .Y 6}}"></path>{{end}}{{if .Label}}<text x="{{.LabelX}}" y="{{.LabelY}}" textLength="{{.LabelW}}" lengthAdjust="spacingAndGlyphs" class="marker-label">{{.Label}}</text>{{end}}</g>
{{end}}</svg>
{{if $s.Unplaced}}<p class="meta unplaced">{{if eq $s.Unplaced 1}}1 label{{else}}{{$s.Unplaced}} labels{{end}} left off the chart for lack of room: hover over or click a marker, or read the table.</p>{{end}}
<table>
<thead><tr><th class="mono">time (UTC)</th><th class="mono">offset</th><th>win</th><th>event</th><th>details</th><th>channel ages (* = active)</th></tr></thead>
<tbody>
{{range $s.Rows}}<tr id="{{.ID}}" class="{{.Class}}-row"><td class="mono">{{.At}}</td><td class="mono">{{.Offset}}</td><td>{{.Window}}</td><td class="mono label{{if .Long}} long{{end}}">{{.Label}}</td><td>{{.Summary}}</td><td class="ages">{{.Ages}}</td></tr>
{{end}}</tbody>
</table>
</section>
{{end}}
<script>
(function () {
  "use strict";
  var markers = document.querySelectorAll("g.marker");
  for (var i = 0; i < markers.length; i++) {
    markers[i].addEventListener("click", function (ev) {
      var prev = document.querySelectorAll("tr.hl");
      for (var j = 0; j < prev.length; j++) { prev[j].classList.remove("hl"); }
      var row = document.getElementById(ev.currentTarget.getAttribute("data-row"));
      if (row) { row.classList.add("hl"); row.scrollIntoView({block: "center"}); }
    });
  }
  document.body.setAttribute("data-ready", String(markers.length));
})();
</script>
</body>
</html>
`
