// Package live lists the session windows open now in a store: who owns
// each, how far into its budget it is, when and by which rule it stops at
// the earliest, its freshest evidence, its calls in flight, its last
// verdict, and how old each of these facts is. It is what an operator looks
// at before reading logs, and what an orchestrator's admin page shows.
//
// A List is built from the events of a store (FromEvents: a file log read
// whole, a MemoryStore's events) or, for a PostgreSQL fleet, read from the
// store's windows table without reading every event (the ReadLive function
// of the stores/postgres module). Both fill the same Row.
//
// The facts come from what owners record: their start and resume events
// (owner, policy, window start), their verdicts, and their evidence
// checkpoints (watchdog.WithCheckpoints in a file log, the lease heartbeat
// in PostgreSQL), which carry each channel's latest evidence, the calls in
// flight and the earliest stop. A row is as fresh as its owner's latest
// checkpoint: FactsAt says when that was.
package live

import (
	"cmp"
	"slices"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Row is one open session window.
type Row struct {
	// Session and Window name the window.
	Session string `json:"session"`
	Window  int    `json:"window"`
	// Owner is the Watchdog that opened or last resumed the window (its
	// Event.Owner: host, pid and a random suffix by default, or the name
	// given with watchdog.WithEventIDPrefix); empty in logs of versions
	// without owners.
	Owner string `json:"owner,omitempty"`
	// WindowStartedAt is when the window began; ElapsedSeconds is the
	// window's age at the list's instant; BudgetSeconds its wall-clock
	// budget (zero if no event of the window says).
	WindowStartedAt time.Time `json:"window_started_at"`
	ElapsedSeconds  float64   `json:"elapsed_seconds"`
	BudgetSeconds   float64   `json:"budget_seconds"`
	// StopAt is the earliest instant a rule stops the window if nothing
	// more happens (watchdog.Snapshot's), and StopRule that rule
	// ("wall_clock", "session_ceiling", "children_wait", "idle"): from
	// the owner's latest checkpoint when it carries one, else the window's
	// absolute deadline (the wall clock from its start, or the session
	// ceiling, as its recorded policy says). Zero if neither is known.
	StopAt   time.Time `json:"stop_at,omitzero"`
	StopRule string    `json:"stop_rule,omitempty"`
	// Freshest is the channel with the latest evidence, FreshestAt that
	// evidence's instant (empty and zero if no channel recorded any).
	Freshest   string    `json:"freshest_channel,omitempty"`
	FreshestAt time.Time `json:"freshest_at,omitzero"`
	// CallsInFlight is how many calls (tool calls, handlers with a
	// deadline) were running at FactsAt; OldestCall names the oldest of
	// them ("" if none, or if the facts do not name it).
	CallsInFlight int    `json:"calls_in_flight"`
	OldestCall    string `json:"oldest_call,omitempty"`
	// LastVerdict is the window's latest verdict or decision; nil if none
	// was recorded.
	LastVerdict *Verdict `json:"last_verdict,omitempty"`
	// FactsAt is when the facts above were taken: the owner's latest
	// checkpoint, verdict or opening, whichever is latest.
	FactsAt time.Time `json:"facts_at"`
	// Lease is the owner's lease, where the store keeps leases (nil
	// otherwise).
	Lease *Lease `json:"lease,omitempty"`
}

// Verdict is a recorded verdict or decision, in short.
type Verdict struct {
	// At is when it was decided.
	At time.Time `json:"at"`
	// Verdict is CONTINUE (a verdict the window outlived) or HARD_STOP (a
	// decision to end it, in shadow mode when the window is still open).
	Verdict string `json:"verdict"`
	// Rule, Reason and ActiveChannel are the event's (see watchdog.Event).
	Rule          string `json:"rule,omitempty"`
	Reason        string `json:"reason,omitempty"`
	ActiveChannel string `json:"active_channel,omitempty"`
}

// Lease is an owner's lease as a fleet's store holds it, judged at the
// list's instant.
type Lease struct {
	ExpiresAt time.Time `json:"expires_at"`
	LastSeen  time.Time `json:"last_seen"`
	Expired   bool      `json:"expired"`
}

// List is the open windows at an instant.
type List struct {
	// At is the instant the list is judged at: the database's clock for a
	// PostgreSQL store, the reader's otherwise.
	At time.Time `json:"at"`
	// Rows are the open windows that pass the filter, by StopAt (earliest
	// first, unknown last), then session (see Sort).
	Rows []Row `json:"sessions"`
}

// Filter selects rows. Its zero value selects every row.
type Filter struct {
	// Owner keeps only the windows of this owner, when not empty.
	Owner string
	// Sessions keeps only these sessions, when not empty.
	Sessions []string
}

// Keep reports whether r passes f.
func (f Filter) Keep(r *Row) bool {
	return (f.Owner == "" || r.Owner == f.Owner) && (len(f.Sessions) == 0 || slices.Contains(f.Sessions, r.Session))
}

// Sort orders rows by StopAt, earliest first, rows without one last, then
// by session and window.
func Sort(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		if a.StopAt.IsZero() != b.StopAt.IsZero() {
			if a.StopAt.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(a.StopAt.Compare(b.StopAt), cmp.Compare(a.Session, b.Session), cmp.Compare(a.Window, b.Window))
	})
}

// FromEvents returns the windows of events that have no terminal event,
// judged at at, that pass f, sorted (see Sort). The events may come in any
// order of sessions, but each session's in the order recorded (a file log,
// a store's Load). leases, by owner, may be nil.
func FromEvents(events []watchdog.Event, at time.Time, leases map[string]Lease, f Filter) List {
	type win struct {
		r      Row
		ended  bool
		policy *watchdog.Policy
		start  time.Time // the session's
		from   time.Time // the budget's (Event.BudgetFrom), if later than the window's start
	}
	last := map[string]*win{}
	var order []string
	for i := range events {
		e := &events[i]
		w := last[e.AggregateID]
		if w == nil || e.Window > w.r.Window {
			if w == nil {
				order = append(order, e.AggregateID)
			}
			w = &win{r: Row{Session: e.AggregateID, Window: e.Window, WindowStartedAt: e.WindowStartedAt}}
			last[e.AggregateID] = w
		}
		if e.Window != w.r.Window {
			continue
		}
		w.ended = w.ended || e.Terminal()
		if e.ConfiguredBudgetSeconds > 0 {
			w.r.BudgetSeconds = e.ConfiguredBudgetSeconds
		}
		if !e.BudgetFrom.IsZero() {
			w.from = e.BudgetFrom
		}
		if e.OccurredAt.After(w.r.FactsAt) {
			w.r.FactsAt = e.OccurredAt
		}
		switch e.Kind {
		case watchdog.KindStart, watchdog.KindResume:
			if e.Owner != "" {
				w.r.Owner = e.Owner
			}
			if e.Policy != nil {
				w.policy, w.start = e.Policy, e.SessionStartedAt
			}
			w.r.WindowStartedAt = e.WindowStartedAt
		case watchdog.KindVerdict, watchdog.KindDecision:
			verdict := "CONTINUE"
			if e.Kind == watchdog.KindDecision {
				verdict = "HARD_STOP"
			}
			w.r.LastVerdict = &Verdict{At: e.OccurredAt, Verdict: verdict, Rule: e.Rule, Reason: e.Reason, ActiveChannel: e.ActiveChannel}
			w.r.CallsInFlight, w.r.OldestCall = max(e.HandlersInFlight, len(e.CallsInFlight)), oldest(e.CallsInFlight)
		case watchdog.KindCheckpoint:
			if len(e.EvidenceSummary) > 0 { // not SaveProgress's
				w.r.CallsInFlight, w.r.OldestCall = max(e.HandlersInFlight, len(e.CallsInFlight)), oldest(e.CallsInFlight)
				w.r.StopAt, w.r.StopRule = e.StopAt, e.StopRule
			}
		}
		if len(e.EvidenceSummary) > 0 {
			w.r.Freshest, w.r.FreshestAt = Freshest(e.EvidenceSummary)
		}
	}
	l := List{At: at.UTC(), Rows: []Row{}}
	for _, id := range order {
		w := last[id]
		if w.ended {
			continue
		}
		r := w.r
		if p := w.policy; p != nil && r.StopAt.IsZero() {
			r.StopAt, r.StopRule = Deadline(p, w.start, r.WindowStartedAt, w.from)
		}
		r.ElapsedSeconds = max(at.Sub(r.WindowStartedAt).Seconds(), 0)
		if ls, ok := leases[r.Owner]; ok && r.Owner != "" {
			ls.Expired = !at.Before(ls.ExpiresAt)
			r.Lease = &ls
		}
		if f.Keep(&r) {
			l.Rows = append(l.Rows, r)
		}
	}
	Sort(l.Rows)
	return l
}

// Deadline returns a window's absolute deadline under policy p and its
// rule: the wall clock (p.WallClock, four hours when zero) from the
// window's start (or from budgetFrom, when later: see
// watchdog.Event.BudgetFrom), or the session ceiling (p.SessionCeiling,
// none when zero) from the session's start, whichever comes first.
func Deadline(p *watchdog.Policy, sessionStart, windowStart, budgetFrom time.Time) (time.Time, string) {
	budget := cmp.Or(p.WallClock, 4*time.Hour)
	from := windowStart
	if budgetFrom.After(from) {
		from = budgetFrom
	}
	at, rule := from.Add(budget), "wall_clock"
	if c := p.SessionCeiling; c > 0 && sessionStart.Add(c).Before(at) {
		at, rule = sessionStart.Add(c), "session_ceiling"
	}
	return at.UTC(), rule
}

// Freshest returns the channel of ev with the latest evidence and its
// instant; "" and zero if none has any.
func Freshest(ev []watchdog.EvidenceEntry) (string, time.Time) {
	var name string
	var at time.Time
	for _, en := range ev {
		if en.LastAt != nil && en.LastAt.After(at) {
			name, at = en.Channel, *en.LastAt
		}
	}
	return name, at
}

func oldest(calls []watchdog.CallInFlight) string {
	if len(calls) == 0 {
		return ""
	}
	return calls[0].Name
}
