package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/termsafe"
)

// defaultWallClock is a window's budget when its policy leaves it zero
// (watchdog.Policy.WallClock).
const defaultWallClock = 4 * time.Hour

// Open is a window with no terminal event in the log: who owns it, when it
// opened, when its absolute rules (the wall clock from the window's start,
// the session ceiling from the session's start, as its start or resume
// record's policy says) are due, and its owner's lease when the store keeps
// leases.
type Open struct {
	Session      string    `json:"session"`
	Window       int       `json:"window"`
	Owner        string    `json:"owner,omitempty"`
	OpenedAt     time.Time `json:"opened_at"`
	Deadline     time.Time `json:"deadline,omitzero"`
	PastDeadline bool      `json:"past_deadline"`
	Lease        *Lease    `json:"lease,omitempty"`
}

// Lease is an owner's lease as the store holds it, judged at the report's
// instant (the database's clock).
type Lease struct {
	ExpiresAt time.Time `json:"expires_at"`
	LastSeen  time.Time `json:"last_seen"`
	Expired   bool      `json:"expired"`
}

// OpenReport lists the open windows at Now.
type OpenReport struct {
	Now  time.Time `json:"now"`
	Open []Open    `json:"open"`
	// PastDeadline and LeaseExpired count the windows past their deadline
	// and those whose owner's lease has expired (nobody watches them).
	PastDeadline int `json:"past_deadline"`
	LeaseExpired int `json:"lease_expired"`
}

// OpenWindows returns the windows of events that have no terminal event, in
// session order, judged at now; leases (by owner, may be nil) are the
// store's.
func OpenWindows(events []watchdog.Event, now time.Time, leases map[string]Lease, f Filter) OpenReport {
	type win struct {
		o      Open
		ended  bool
		policy *watchdog.Policy
		start  time.Time
	}
	last := map[string]*win{}
	for _, e := range events {
		if len(f.Sessions) > 0 && !contains(f.Sessions, e.AggregateID) {
			continue
		}
		w := last[e.AggregateID]
		if w == nil || e.Window > w.o.Window {
			w = &win{o: Open{Session: e.AggregateID, Window: e.Window, OpenedAt: e.WindowStartedAt}}
			last[e.AggregateID] = w
		}
		if e.Window != w.o.Window {
			continue
		}
		if e.Terminal() {
			w.ended = true
		}
		if e.Kind == watchdog.KindStart || e.Kind == watchdog.KindResume {
			if e.Owner != "" {
				w.o.Owner = e.Owner
			}
			if e.Policy != nil {
				w.policy, w.start = e.Policy, e.SessionStartedAt
			}
			w.o.OpenedAt = e.WindowStartedAt
		}
	}
	r := OpenReport{Now: now.UTC(), Open: []Open{}}
	for _, w := range last {
		if w.ended {
			continue
		}
		o := w.o
		if p := w.policy; p != nil {
			budget := p.WallClock
			if budget == 0 {
				budget = defaultWallClock
			}
			o.Deadline = o.OpenedAt.Add(budget)
			if c := p.SessionCeiling; c > 0 && w.start.Add(c).Before(o.Deadline) {
				o.Deadline = w.start.Add(c)
			}
			o.PastDeadline = now.After(o.Deadline)
		}
		if l, ok := leases[o.Owner]; ok && o.Owner != "" {
			l.Expired = !now.Before(l.ExpiresAt)
			o.Lease = &l
		}
		if o.PastDeadline {
			r.PastDeadline++
		}
		if o.Lease != nil && o.Lease.Expired {
			r.LeaseExpired++
		}
		r.Open = append(r.Open, o)
	}
	sort.Slice(r.Open, func(i, j int) bool { return r.Open[i].Session < r.Open[j].Session })
	return r
}

// WriteOpenText writes r as a table, one open window per line.
func WriteOpenText(w io.Writer, r OpenReport) error {
	fmt.Fprintf(w, "%d open windows at %s: %d past their deadline, %d whose owner's lease has expired\n",
		len(r.Open), stamp(r.Now), r.PastDeadline, r.LeaseExpired)
	if len(r.Open) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tWINDOW\tOWNER\tOPENED\tDEADLINE\tSTATUS\tLEASE")
	for _, o := range r.Open {
		deadline, status := "-", "-"
		if !o.Deadline.IsZero() {
			deadline = stamp(o.Deadline)
			if d := r.Now.Sub(o.Deadline); o.PastDeadline {
				status = "past deadline by " + d.Round(time.Millisecond).String()
			} else {
				status = "due in " + (-d).Round(time.Millisecond).String()
			}
		}
		lease := "-"
		if l := o.Lease; l != nil {
			if l.Expired {
				lease = fmt.Sprintf("expired %s ago (last seen %s)", r.Now.Sub(l.ExpiresAt).Round(time.Millisecond), stamp(l.LastSeen))
			} else {
				lease = "live until " + stamp(l.ExpiresAt)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", termsafe.String(o.Session), o.Window, orDash(termsafe.String(o.Owner)),
			stamp(o.OpenedAt), deadline, status, lease)
	}
	return tw.Flush()
}

// WriteOpenJSON writes r as one JSON object.
func WriteOpenJSON(w io.Writer, r OpenReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
