package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
)

// WriteText writes r as a human-readable timeline per session: one line per
// event with its instant, its offset from the session's start, its window,
// label and summary, and under each event that carries an evidence summary
// the age of every channel's latest evidence. Every field taken from the log
// is escaped with termsafe.String, so the text holds no control character
// other than its own newlines and tabs, and no field can fake a line.
func WriteText(w io.Writer, r Report) error {
	if len(r.Sessions) == 0 {
		_, err := fmt.Fprintln(w, "no events match")
		return err
	}
	for i, s := range r.Sessions {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "session %s\n", termsafe.String(s.ID))
		fmt.Fprintf(w, "  %s, windows %s, %d events shown", s.started(), ints(s.Windows), len(s.Timeline))
		if s.Final != "" {
			fmt.Fprintf(w, ", ended %s", termsafe.String(s.Final))
		} else {
			fmt.Fprint(w, ", no terminal event shown")
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		origin := s.origin()
		for _, en := range s.Timeline {
			e := en.Event
			fmt.Fprintf(tw, "  %s\t+%s\tw%d\t%s\t%s\n", stamp(e.OccurredAt), secs(e.OccurredAt.Sub(origin).Seconds()), e.Window, termsafe.String(en.Label), termsafe.String(en.Summary))
			if len(en.Ages) > 0 {
				fmt.Fprintf(tw, "  \t\t\t\tchannel ages: %s\n", ages(en))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// ages lists every channel's evidence age at en, marking the active one.
func ages(en Entry) string {
	parts := make([]string, 0, len(en.Ages))
	for _, a := range en.Ages {
		age := "never"
		if a.AgeSeconds != nil {
			age = secs(*a.AgeSeconds)
		}
		mark := ""
		if a.Channel == en.Event.ActiveChannel {
			mark = "*"
		}
		parts = append(parts, fmt.Sprintf("%s%s %s", termsafe.String(a.Channel), mark, age))
	}
	return strings.Join(parts, ", ")
}

func ints(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ",")
}

// WriteJSON writes r as one indented JSON document: {"sessions": [...]},
// each session with its timeline of entries, each entry holding its label,
// summary, channel ages and the full recorded event.
func WriteJSON(w io.Writer, r Report) error {
	if r.Sessions == nil {
		r.Sessions = []Session{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
