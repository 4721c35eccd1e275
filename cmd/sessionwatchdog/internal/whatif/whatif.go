// Package whatif renders watchdog.WhatIf's report for the sessionwatchdog
// whatif command: as text, as JSON and as one self-contained HTML page.
// Every string taken from the log (session ids, rule names, end reasons,
// the reasons a window is undetermined) is escaped: with termsafe.String in
// the text, and by html/template after termsafe.String in the page.
package whatif

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
	wi "github.com/sessionwatchdog/watchdog/whatif"
)

// Filter keeps the windows of the sessions listed; none keeps every one.
func Filter(events []watchdog.Event, sessions []string) []watchdog.Event {
	if len(sessions) == 0 {
		return events
	}
	keep := make(map[string]bool, len(sessions))
	for _, s := range sessions {
		keep[s] = true
	}
	var out []watchdog.Event
	for _, e := range events {
		if keep[e.AggregateID] {
			out = append(out, e)
		}
	}
	return out
}

// WriteText writes r as text: the candidate policy, one block per window
// (its outcome, the recorded and the candidate's decisions with their
// offsets from the window's opening, the changes, a likely false stop, why
// the log cannot decide) and the totals.
func WriteText(w io.Writer, r wi.Report, source string) error {
	pol, err := json.Marshal(r.Candidate)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "what-if of %s under the candidate policy %s\n", termsafe.String(source), pol)
	fmt.Fprintf(w, "evidence: %s\n", evidenceNote(r.CheckpointEvery))
	for _, win := range r.Windows {
		fmt.Fprintf(w, "\nsession %s window %d: %s\n", termsafe.String(win.SessionID), win.Window, strings.ToUpper(string(win.Outcome)))
		for _, l := range lines(win) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		if r.CheckpointEvery == 0 && win.CheckpointEvery > 0 {
			fmt.Fprintf(w, "  checkpoint interval %v, read from the log\n", win.CheckpointEvery)
		}
	}
	t := r.Totals
	_, err = fmt.Fprintf(w, "\ntotals: %d sessions, %d windows: %d unchanged, %d earlier, %d later, %d never, %d undetermined; %d likely false stops; %d changed decisions\n",
		t.Sessions, t.Windows, t.Unchanged, t.Earlier, t.Later, t.Never, t.Undetermined, t.FalseStops, t.Changes)
	return err
}

func evidenceNote(every time.Duration) string {
	if every <= 0 {
		return "dated by the recorded counters, and by checkpoints at the interval the log records on them, plus a tenth for the pass's own time (a window without: nothing is known after its last observation); tool calls by their records (WithCallRecords)"
	}
	return fmt.Sprintf("dated by the recorded counters and by checkpoints every %v (no checkpoint proves no evidence until %v before a window's end)", every, every)
}

// lines are a window's text lines, escaped.
func lines(win wi.Window) []string {
	at := func(t time.Time) string {
		return fmt.Sprintf("+%.3fs", t.Sub(win.OpenedAt).Seconds())
	}
	decisions := func(ds []wi.Decision) string {
		if len(ds) == 0 {
			return "none"
		}
		parts := make([]string, len(ds))
		for i, d := range ds {
			parts[i] = fmt.Sprintf("%s %s at %s", termsafe.String(d.Rule), d.Mode, at(d.At))
		}
		return strings.Join(parts, ", ")
	}
	opened := fmt.Sprintf("opened %s, followed to %s (%s)", stamp(win.OpenedAt), at(win.EndedAt), termsafe.String(win.End))
	if win.OpenedAt.IsZero() {
		opened = "opened before the log (its opening event is not in it)"
	}
	out := []string{
		opened,
		"recorded:  " + decisions(win.Recorded),
		"candidate: " + decisions(win.Candidate),
		"decided until " + at(win.DecidedUntil),
	}
	for _, c := range win.Changes {
		out = append(out, fmt.Sprintf("changed: %s at %s: recorded %s, candidate %s", termsafe.String(c.Rule), at(c.At), orNone(c.Recorded), orNone(c.Candidate)))
	}
	if win.FalseStop {
		out = append(out, "likely false stop: "+termsafe.String(win.FalseStopWhy))
	}
	if win.Undetermined != "" {
		out = append(out, "undetermined: "+termsafe.String(win.Undetermined))
	}
	return out
}

func orNone(m watchdog.Mode) string {
	if m == "" {
		return "none"
	}
	return string(m)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// WriteJSON writes r as one indented JSON document: the candidate policy
// (its JSON knobs), checkpoint_every_ns, windows and totals.
func WriteJSON(w io.Writer, r wi.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteHTML writes r as one self-contained HTML page (no script, no
// external resource): the totals and a table of the windows.
func WriteHTML(w io.Writer, r wi.Report, source string) error {
	pol, err := json.Marshal(r.Candidate)
	if err != nil {
		return err
	}
	type row struct {
		Session, Outcome, End, Recorded, Candidate, DecidedUntil, Changes, FalseStop, Undetermined string
		Window                                                                                     int
	}
	page := struct {
		Source, Policy, Evidence string
		Totals                   wi.Totals
		Rows                     []row
	}{Source: termsafe.String(source), Policy: string(pol), Evidence: evidenceNote(r.CheckpointEvery), Totals: r.Totals}
	for _, win := range r.Windows {
		ls := lines(win) // escaped already; the template escapes for HTML
		var changes []string
		for _, l := range ls {
			if strings.HasPrefix(l, "changed: ") {
				changes = append(changes, strings.TrimPrefix(l, "changed: "))
			}
		}
		page.Rows = append(page.Rows, row{
			Session: termsafe.String(win.SessionID), Window: win.Window, Outcome: string(win.Outcome),
			End:      strings.TrimPrefix(ls[0], "opened "),
			Recorded: strings.TrimPrefix(ls[1], "recorded:  "), Candidate: strings.TrimPrefix(ls[2], "candidate: "),
			DecidedUntil: strings.TrimPrefix(ls[3], "decided until "), Changes: strings.Join(changes, "; "),
			FalseStop: termsafe.String(win.FalseStopWhy), Undetermined: termsafe.String(win.Undetermined),
		})
	}
	return pageTemplate().Execute(w, page)
}

// pageTemplate is parsed at its first use, not at the start of every
// sessionwatchdog process (run's start-up among them).
var pageTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Parse(pageHTML))
})

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sessionwatchdog whatif: {{.Source}}</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; overflow-wrap: anywhere; }
.meta { color: #5a6272; margin: 0 0 8px; overflow-wrap: anywhere; }
code { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin-top: 10px; width: 100%; font-size: 12px; }
th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eceef2; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f3f5f8; white-space: nowrap; }
td.mono { font-family: ui-monospace, monospace; }
.o-earlier { background: #fbd3cf; } .o-later { background: #dbe8fb; } .o-never { background: #e6f4ea; }
.o-undetermined { background: #fff0c2; } .o-unchanged { }
</style>
</head>
<body data-windows="{{len .Rows}}">
<h1>what-if of {{.Source}}</h1>
<p class="meta">candidate policy <code>{{.Policy}}</code></p>
<p class="meta">evidence {{.Evidence}}. Offsets are from each window's opening; times are UTC.</p>
<p id="totals">{{.Totals.Sessions}} sessions, {{.Totals.Windows}} windows: {{.Totals.Unchanged}} unchanged, {{.Totals.Earlier}} earlier, {{.Totals.Later}} later, {{.Totals.Never}} never, {{.Totals.Undetermined}} undetermined; {{.Totals.FalseStops}} likely false stops; {{.Totals.Changes}} changed decisions.</p>
{{if not .Rows}}<p id="empty">No windows.</p>{{else}}
<table>
<thead><tr><th>session</th><th>win</th><th>outcome</th><th>window</th><th>recorded decisions</th><th>candidate decisions</th><th>decided until</th><th>changes</th><th>likely false stop</th><th>undetermined</th></tr></thead>
<tbody>
{{range .Rows}}<tr class="o-{{.Outcome}}"><td class="mono">{{.Session}}</td><td>{{.Window}}</td><td>{{.Outcome}}</td><td class="mono">{{.End}}</td><td class="mono">{{.Recorded}}</td><td class="mono">{{.Candidate}}</td><td class="mono">{{.DecidedUntil}}</td><td class="mono">{{.Changes}}</td><td>{{.FalseStop}}</td><td>{{.Undetermined}}</td></tr>
{{end}}</tbody>
</table>{{end}}
</body>
</html>
`
