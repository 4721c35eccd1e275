// Package top writes the live list of open session windows (the live
// package's List) as the "sessionwatchdog top" command prints it: a plain
// table per refresh, or one JSON document per refresh.
package top

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
	"github.com/sessionwatchdog/watchdog/live"
)

// MaxCell is the widest a text cell from the log (a session id, an owner, a
// channel, a call's name) is printed, in runes, unless Options.Wide: the
// middle of a longer one is cut to "…".
const MaxCell = 32

// Options are the table's.
type Options struct {
	// Wide prints every cell whole.
	Wide bool
	// Source names what was read ("events.jsonl", "postgres:TABLE"), in
	// the header.
	Source string
}

// WriteText writes l as a header line and a table, one open window per
// line, then a blank line. Every value read from the log is escaped for
// the terminal (termsafe.String).
func WriteText(w io.Writer, l live.List, o Options) error {
	expired := 0
	for _, r := range l.Rows {
		if r.Lease != nil && r.Lease.Expired {
			expired++
		}
	}
	fmt.Fprintf(w, "%s  %d open windows  %s", stamp(l.At), len(l.Rows), termsafe.String(o.Source))
	if expired > 0 {
		fmt.Fprintf(w, "  %d whose owner's lease has expired", expired)
	}
	fmt.Fprintln(w)
	if len(l.Rows) == 0 {
		_, err := fmt.Fprintln(w)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tWIN\tOWNER\tELAPSED/BUDGET\tSTOPS IN\tRULE\tFRESHEST\tCALLS\tLAST VERDICT\tFACTS AGE")
	for _, r := range l.Rows {
		cell := func(s string) string { return orDash(termsafe.String(cut(s, o.Wide))) }
		owner := cell(r.Owner)
		if r.Lease != nil && r.Lease.Expired {
			owner += " (lease expired)"
		}
		budget := "-"
		if r.BudgetSeconds > 0 {
			budget = dur(time.Duration(r.BudgetSeconds * float64(time.Second)))
		}
		stops := "-"
		if !r.StopAt.IsZero() {
			if d := r.StopAt.Sub(l.At); d >= 0 {
				stops = dur(d)
			} else {
				stops = "overdue " + dur(-d)
			}
		}
		fresh := "-"
		if r.Freshest != "" {
			fresh = cell(r.Freshest) + " " + dur(l.At.Sub(r.FreshestAt)) + " ago"
		}
		calls := fmt.Sprint(r.CallsInFlight)
		if r.OldestCall != "" {
			calls += " (" + cell(r.OldestCall) + ")"
		}
		verdict := "-"
		if v := r.LastVerdict; v != nil {
			verdict = v.Verdict + " " + cell(orDash(v.Rule, v.Reason)) + " " + dur(l.At.Sub(v.At)) + " ago"
		}
		facts := "-"
		if !r.FactsAt.IsZero() {
			facts = dur(l.At.Sub(r.FactsAt))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.Session), r.Window, owner,
			dur(time.Duration(r.ElapsedSeconds*float64(time.Second))), budget, stops, cell(r.StopRule), fresh, calls, verdict, facts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteJSON writes l as one JSON document on one line (a refresh per
// line: JSON Lines). JSON escapes every control character.
func WriteJSON(w io.Writer, l live.List) error {
	return json.NewEncoder(w).Encode(l)
}

// cut shortens s to MaxCell runes, cutting its middle, unless wide.
func cut(s string, wide bool) string {
	if wide || utf8.RuneCountInString(s) <= MaxCell {
		return s
	}
	r := []rune(s)
	half := (MaxCell - 1) / 2
	return string(r[:half]) + "…" + string(r[len(r)-(MaxCell-1-half):])
}

// dur prints d to the second (to the millisecond under 10 s), negative
// values as zero.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func orDash(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return "-"
}
