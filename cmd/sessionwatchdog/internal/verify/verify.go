// Package verify re-derives the verdicts of an event log and reports the
// ones that do not check out. The re-derivation itself is the library's
// (watchdog.Replay); this package selects the events, counts what was
// checked and renders the result.
package verify

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"

	"github.com/sessionwatchdog/watchdog"
)

// ReplayFunc re-derives every verdict of a log and returns the mismatches.
// watchdog.Replay is the one the command uses.
type ReplayFunc func(events []watchdog.Event) ([]watchdog.Mismatch, error)

// Result is what verify found in one log.
type Result struct {
	// File names the log.
	File string `json:"file"`
	// Sessions and Events count what was replayed.
	Sessions int `json:"sessions"`
	Events   int `json:"events"`
	// Checked counts the events that carry a verdict or link one (verdict,
	// decision, outcome, deadline and wait-timeout events).
	Checked int `json:"checked"`
	// Mismatches are the events that do not check out; empty when the log
	// is self-consistent.
	Mismatches []Mismatch `json:"mismatches"`
}

// Mismatch is one event that does not check out.
type Mismatch struct {
	// Seq, EventID, SessionID and Kind identify the event.
	Seq       uint64 `json:"seq"`
	EventID   string `json:"event_id"`
	SessionID string `json:"session_id"`
	Kind      string `json:"event_kind"`
	// Recorded is what the log says; Derived is what the decision says.
	Recorded string `json:"recorded"`
	Derived  string `json:"derived"`
}

// OK reports whether no mismatch was found.
func (r Result) OK() bool { return len(r.Mismatches) == 0 }

// checked are the kinds Replay checks.
var checked = map[string]bool{
	watchdog.KindVerdict: true, watchdog.KindDecision: true, watchdog.KindCancel: true,
	watchdog.KindSuperseded: true, watchdog.KindActionFailed: true, watchdog.KindAttemptCancelled: true,
	watchdog.KindHandlerDeadline: true, watchdog.KindWaitTimeout: true,
}

// Run replays the events of the sessions in only (every session when only
// is empty). Replay needs each session's whole history (its policy is on its
// start event), so only whole sessions can be selected. The error is
// replay's: a log it cannot read.
func Run(file string, events []watchdog.Event, only []string, replay ReplayFunc) (Result, error) {
	keep := map[string]bool{}
	for _, id := range only {
		keep[id] = true
	}
	r := Result{File: file, Mismatches: []Mismatch{}}
	seen := map[string]bool{}
	var sel []watchdog.Event
	for _, e := range events {
		if len(keep) > 0 && !keep[e.AggregateID] {
			continue
		}
		sel = append(sel, e)
		if !seen[e.AggregateID] {
			seen[e.AggregateID] = true
			r.Sessions++
		}
		if checked[e.Kind] {
			r.Checked++
		}
	}
	r.Events = len(sel)
	ms, err := replay(sel)
	if err != nil {
		return r, fmt.Errorf("%s: replay: %w", file, err)
	}
	for _, m := range ms {
		r.Mismatches = append(r.Mismatches, Mismatch{Seq: m.Event.Seq, EventID: m.Event.ID, SessionID: m.Event.AggregateID, Kind: m.Event.Kind, Recorded: m.Recorded, Derived: m.Derived})
	}
	return r, nil
}

// WriteText writes one line per mismatch, then a summary line.
func WriteText(w io.Writer, r Result) error {
	for _, m := range r.Mismatches {
		fmt.Fprintf(w, "%s: MISMATCH seq %d event %s (%s, session %q): recorded %s, re-derived %s\n",
			termsafe.String(r.File), m.Seq, termsafe.String(m.EventID), termsafe.String(m.Kind), m.SessionID, termsafe.String(m.Recorded), termsafe.String(m.Derived))
	}
	status := "ok"
	if !r.OK() {
		status = fmt.Sprintf("FAIL: %d mismatches", len(r.Mismatches))
	}
	_, err := fmt.Fprintf(w, "%s: %s (%d sessions, %d events, %d verdicts and outcomes checked)\n", termsafe.String(r.File), status, r.Sessions, r.Events, r.Checked)
	return err
}

// WriteJSON writes r as one indented JSON document.
func WriteJSON(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
