package watchdog

import (
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
)

// Snapshot is a session's window read while it runs (Session.Snapshot):
// its evidence, its calls in flight, and when its rules would stop it if
// nothing more happened. It is a plain value, safe to copy and share; its
// instants are on the wall clock of the Watchdog's Clock (as
// Session.Deadline), and its JSON form is a stable object (snake_case
// keys) for an operator's view.
type Snapshot struct {
	SessionID       string    `json:"session_id"`
	Window          int       `json:"window"`
	WindowStartedAt time.Time `json:"window_started_at"`
	// At is the instant the snapshot read the session: the ages of its
	// evidence are At minus each channel's LastAt.
	At time.Time `json:"at"`
	// Deadline is the window's wall-clock deadline (Session.Deadline).
	Deadline time.Time `json:"deadline"`
	// Running is false once the window has ended (Stop, a fire, Close):
	// the rest then describes its last instant, and StopAt is zero.
	Running bool `json:"running"`
	// Evidence is each channel's last evidence and counter in the window,
	// the built-in channels first, as in a verdict's EvidenceSummary.
	Evidence []EvidenceEntry `json:"evidence"`
	// Calls lists the calls in flight (Begin, Call, Within with
	// LayerHandler), oldest first: at most 100; CallsInFlight counts them
	// all.
	Calls         []CallInFlight `json:"calls,omitempty"`
	CallsInFlight int            `json:"calls_in_flight"`
	// ChildWaitOpen: a child wait (Session.BeginChildWait) is open.
	ChildWaitOpen bool `json:"child_wait_open,omitempty"`
	// StopAt is the earliest instant at which the session's rules (the
	// wall clock, the ceilings, the idle rule with its settle checks) stop
	// it if nothing more happens: no evidence on any channel, no call
	// begins, the calls in flight run until their cap and grace, an open
	// child wait stays open. StopRule names the rule ("wall_clock",
	// "session_ceiling", "children_wait", "idle"). A rule in shadow mode
	// stops nothing and is left out; zero and "" when no rule would stop
	// the session, or once it has ended. Liveness rules of the user's
	// (ReportLiveness) decide on reports and are not foreseen.
	StopAt   time.Time `json:"stop_at,omitzero"`
	StopRule string    `json:"stop_rule,omitempty"`
}

// Snapshot reads the session's window as it is now (see Snapshot). It
// never waits for user code or the store: it reads the Clock, then the
// session's state under the Watchdog's lock for a time that grows with
// the calls in flight (two passes over them: take one per operator's
// refresh, not per event), and computes the rest after releasing it. Safe
// for concurrent use; a nil Session gives the zero Snapshot.
func (s *Session) Snapshot() Snapshot {
	if s == nil || s.w == nil {
		return Snapshot{}
	}
	w := s.w
	now := w.now()
	w.mu.Lock()
	cfg := s.cfg
	sn, at := s.snapshot(now)
	running := s.state.Load() == stateRunning
	calls := s.callsLocked()
	var last time.Time // when the last call in flight is over
	for l := s.r().calls.Front(); l != nil; l = l.inCalls.Next() {
		end := l.deadline.Add(l.grace)
		if l.state == layerFired {
			end = time.Unix(0, l.item.Due)
		}
		if end.After(last) {
			last = end
		}
	}
	w.mu.Unlock()

	out := Snapshot{SessionID: s.id, Window: int(s.window), WindowStartedAt: w.wall(s.windowStartedAt),
		At: w.wall(at), Deadline: w.wall(s.budgetStart().Add(cfg.limits.WallClock)), Running: running,
		Evidence: s.summary(sn, at), Calls: calls, CallsInFlight: sn.BoundedWork,
		ChildWaitOpen: !sn.ChildWaitOpenSince.IsZero()}
	for i := range out.Evidence {
		if e := &out.Evidence[i]; e.LastAt != nil {
			*e.LastAt = w.wall(*e.LastAt) // the summary's own instants
		}
	}
	for i := range out.Calls {
		c := &out.Calls[i]
		c.StartedAt = w.wall(c.StartedAt)
		if !c.ProgressAt.IsZero() {
			c.ProgressAt = w.wall(c.ProgressAt)
		}
	}
	if running {
		sn.BoundedUntil = last
		if stop, rule, ok := decide.EarliestStop(cfg.limits, sn, at); ok {
			out.StopAt, out.StopRule = w.wall(stop), ruleNames[rule]
		}
	}
	return out
}

// times are sn's instants that a checkpoint records: its evidence's, its
// calls', its window's start and deadline, its earliest stop.
func (sn *Snapshot) times() []*time.Time {
	ts := []*time.Time{&sn.StopAt, &sn.WindowStartedAt, &sn.Deadline}
	for i := range sn.Evidence {
		ts = append(ts, sn.Evidence[i].LastAt) // nil if none
	}
	for i := range sn.Calls {
		ts = append(ts, &sn.Calls[i].StartedAt, &sn.Calls[i].ProgressAt)
	}
	return ts
}
