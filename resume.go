package watchdog

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"go.uber.org/zap"
)

// Resume re-attaches a session recorded in the store: it reads
// session_started_at and the last window from the store (and from this
// Watchdog's events not recorded yet), so the budget survives a process
// restart with no extra state. If the last window has no terminal event the
// session continues it, with its original start and under the whole policy
// recorded for it: limits, channels, phase budgets, liveness rules and
// modes (p is validated but applies from the next window: a supervisor
// configured differently never changes a running window; a differing p is
// logged at warn level). Its timers go on from the window's records, never
// restarted by the resume: the startup grace from the window's start, the
// idle rule from the latest evidence recorded for the window (on verdicts,
// decisions and checkpoints, see WithCheckpoints and RecordCheckpoint) with
// its settle count; with none recorded, the evidence rules start again at
// the resume, and the resume event says so (observed_since). Settle counts
// of liveness rules start again. Under Policy.SupervisedOnly the time since
// the owner's last record is added to the budget. If the last window ended
// (a cancel or a stop) Resume opens the next window under p, starting now.
// It records a resume event (with the evidence it continued from) and arms
// the scheduler before it returns. Resume does not judge whether a session
// should go on (see Result.Resumable): a session that outran its ceiling is
// cancelled again at once, since the ceiling counts from the session's start.
//
// A Resume that opens a window waits, with a store that arbitrates
// openings, for the store's answer as Start does: of several Watchdogs that
// resume an ended session at once, one opens the next window and the others
// get an error wrapping ErrAlreadyWatched.
//
// Resume returns ErrUnknownSession when the store has no event for id, the
// store's error when Load fails, ErrAlreadyWatched, ErrClosed, or an error
// wrapping ErrInvalidArgument or ErrInvalidPolicy.
func (w *Watchdog) Resume(ctx context.Context, id string, p Policy) (*Session, error) {
	if err := checkWorkspaceDir(p); err != nil {
		return nil, err
	}
	return watchDeclared(w.resume(ctx, id, p, nil))
}

// Amend changes the policy of s's session, as an explicit and recorded act:
// it ends s's window with a stop (reason "amended", StopAmended) and opens
// the next window at once under p, whose resume event records who amended
// it (by), why (why) and the new policy. So no live window's deadline ever
// changes: s's context ends (cause ErrSessionStopped) and the returned
// Session, whose context derives from ctx, runs the new window. by and why
// are text of 1 to 1,024 bytes (see Start); p is validated before anything
// is recorded. It returns an error wrapping ErrInvalidArgument or
// ErrInvalidPolicy for bad input (s's window goes on), the window's end
// cause if it had already ended, or Resume's errors.
func (s *Session) Amend(ctx context.Context, p Policy, by, why string) (*Session, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil session", ErrInvalidArgument)
	}
	if err := validateStart(ctx, s.id, p); err != nil {
		return nil, err
	}
	if err := checkBy(by, why); err != nil {
		return nil, err
	}
	if err := checkWorkspaceDir(p); err != nil {
		return nil, err
	}
	won, err := s.stop(StopAmended)
	if !won {
		if err == nil {
			err = ErrSessionStopped
		}
		return nil, fmt.Errorf("watchdog: amend %q: window %d had already ended: %w", s.id, s.window, err)
	}
	return watchDeclared(s.w.resume(ctx, s.id, p, nil, by, why))
}

// resume is Resume; with adopted, it takes over the open window the store
// handed this Watchdog (see adoptOrphan), under its recorded policy; with
// amend, its resume event records who amended the policy and why.
func (w *Watchdog) resume(ctx context.Context, id string, p Policy, adopted *Orphan, amend ...string) (*Session, error) {
	if err := validateStart(ctx, id, p); err != nil {
		return nil, err
	}
	if err := w.backPressure(id); err != nil {
		return nil, err
	}
	s := w.newSession(ctx, id, p)
	if len(amend) == 2 { // before the session is shared
		r := s.rw()
		r.by, r.why = amend[0], amend[1]
	}
	if err := w.reserve(s); err != nil {
		return s.orCancel(err)
	}
	fail := func(err error) (*Session, error) { w.release(s); s.cancel(err); return nil, err }
	// Pending events first: an event that leaves the queue after this
	// point is in the store when Load reads it.
	pending := w.rec.Pending(id)
	loaded, err := w.loadEvents(ctx, id)
	if err == nil && len(loaded) == 0 && len(pending) == 0 {
		err = fmt.Errorf("%w: %q", ErrUnknownSession, id)
	} else if err != nil {
		err = fmt.Errorf("watchdog: resume %q: load: %w", id, err)
	}
	if err != nil {
		return fail(err)
	}
	// The start instants are read from the latest events: a step of the
	// wall clock shifts those recorded after it (see timeline.go).
	seen := make(map[string]bool, len(loaded))
	last, ended := 0, false
	var lastWindowStart time.Time
	var recorded *Policy // the last window's policy, from its start or resume record
	var c carried        // what the last window's records say of its evidence
	var saved *Event     // the latest record of saved progress (SaveProgress), of any window
	for _, evs := range [][]Event{loaded, pending} {
		for _, e := range evs {
			if seen[e.ID] {
				continue
			}
			seen[e.ID] = true
			if err := checkLoaded(&e, id); err != nil {
				return fail(err)
			}
			if !e.SessionStartedAt.IsZero() {
				s.sessionStartedAt = e.SessionStartedAt.UTC()
			}
			if (e.Kind == KindCheckpoint || e.Kind == KindResume) && (e.ProgressValue != 0 || e.Payload != nil) {
				saved = &e
			}
			if e.Window > last {
				last, ended, recorded, c = e.Window, false, nil, carried{}
			}
			if e.Window == last {
				c.add(&e)
				if e.Policy != nil && (e.Kind == KindStart || e.Kind == KindResume) {
					recorded = e.Policy
				}
				lastWindowStart = e.WindowStartedAt
				if e.Terminal() {
					ended = true
				}
			}
		}
	}
	if s.sessionStartedAt.IsZero() {
		return fail(fmt.Errorf("%w: resume %q: the store's events carry no session_started_at", ErrInvalidEvent, id))
	}
	w.now() // the wall clock's offset, current
	s.sessionStartedAt = w.fromRecord(s.sessionStartedAt)
	lastWindowStart = w.fromRecord(lastWindowStart)
	window, fresh := decide.ResumeWindow(last, ended)
	if adopted != nil && (fresh || window != adopted.Window || pendingIn(pending, adopted.Window)) {
		err := errNotOpen
		if pendingIn(pending, adopted.Window) && !endedIn(loaded, adopted.Window) {
			// This Watchdog's events of the window, made while it held
			// it before, are not judged yet: the store records or refuses
			// them (fenced while another owner held the window) before
			// the adoption is looked at again.
			err = errPending
		}
		return fail(err)
	}
	if window > math.MaxInt32 {
		return fail(fmt.Errorf("%w: resume %q: window %d is the last one a session can have", ErrInvalidEvent, id, last))
	}
	s.window = int32(window)
	s.windowStartedAt = lastWindowStart.UTC()
	if saved != nil { // before the session is shared; its resume event records it again
		r := s.rw()
		r.progress, r.payload = saved.ProgressValue, saved.Payload
	}
	switch {
	case fresh:
		s.windowStartedAt = w.now()
	case recorded != nil && adopted != nil:
		s.usePolicy(*recorded)
	case recorded != nil && !recorded.same(&p):
		// An open window keeps the policy it was opened with: a supervisor
		// configured differently does not silently change a running budget.
		w.log.Warn("watchdog: resume continues the open window under its recorded policy; the policy passed applies from the session's next window",
			zap.String("session_id", id), zap.Int("window", window))
		s.usePolicy(*recorded)
	}
	if !fresh {
		if adopted != nil {
			c.addEvidence(adopted.Evidence) // the owner's last checkpoint
		}
		w.carry(s, &c, adopted) // after usePolicy: it sets the channels
	}
	if adopted == nil && (fresh || w.openings != nil) {
		return w.open(ctx, s, KindResume, true, fresh)
	}
	return s.orCancel(w.activate(s, KindResume, true, false, adopted))
}

// pendingIn reports whether evs hold an event of window.
func pendingIn(evs []Event, window int) bool {
	return slices.ContainsFunc(evs, func(e Event) bool { return e.Window == window })
}

// endedIn reports whether evs hold a terminal event of window, or a later window's.
func endedIn(evs []Event, window int) bool {
	return slices.ContainsFunc(evs, func(e Event) bool { return e.Window > window || e.Window == window && e.Terminal() })
}

// carried is what an open window's records (verdicts, decisions,
// checkpoints, resumes) say of its evidence, for a Resume or an adoption
// that continues the window.
type carried struct {
	evidence   []EvidenceEntry // each channel's latest recorded instant and counter
	floor      time.Time       // the latest recorded observed_since
	budgetFrom time.Time       // the latest recorded budget_from
	lastAt     time.Time       // the latest record's instant: the owner's last sign of life
	stale      int             // the idle rule's settle count at staleAt, if its last record is stale
	staleAt    time.Time
}

func (c *carried) add(e *Event) {
	c.addEvidence(e.EvidenceSummary)
	c.floor = later(c.floor, e.ObservedSince)
	c.budgetFrom = later(c.budgetFrom, e.BudgetFrom)
	if e.Kind != KindCheckpoint || e.Owner != "" { // a remote worker's is no sign of the owner
		c.lastAt = later(c.lastAt, e.OccurredAt)
	}
	if e.Rule == ruleIdle {
		switch {
		case e.Kind == KindVerdict && e.SettleCount > 0:
			c.stale, c.staleAt = e.SettleCount, e.OccurredAt
		case e.Kind == KindDecision:
			c.stale = 0
		}
	}
}

func (c *carried) addEvidence(ev []EvidenceEntry) {
next:
	for _, en := range ev {
		if en.LastAt == nil && en.Counter == 0 {
			continue
		}
		for i := range c.evidence {
			old := &c.evidence[i]
			if old.Channel != en.Channel {
				continue
			}
			if en.LastAt != nil && (old.LastAt == nil || en.LastAt.After(*old.LastAt)) {
				old.LastAt = en.LastAt
			}
			old.Counter = max(old.Counter, en.Counter)
			continue next
		}
		c.evidence = append(c.evidence, EvidenceEntry{Channel: en.Channel, LastAt: en.LastAt, Counter: en.Counter})
	}
}

// carry continues s's open window from what its records say (c), so that
// the resume restarts none of its evidence, idle floor and settle count;
// with none recorded the evidence rules start again now (observed_since
// says so). Called before s is shared.
func (w *Watchdog) carry(s *Session, c *carried, adopted *Orphan) {
	r := s.rw()
	r.continued = true
	if s.cfg.policy.SupervisedOnly {
		// The time since the owner's last sign of life was not supervised.
		seen := c.lastAt
		if adopted != nil {
			seen = later(seen, adopted.LastSeen)
		}
		from := later(s.windowStartedAt, w.fromRecord(c.budgetFrom))
		if gap := w.now().Sub(w.fromRecord(seen)); !seen.IsZero() && gap > 0 {
			from = from.Add(gap)
		}
		if from.After(s.windowStartedAt) {
			r.budgetFrom = from
		}
	}
	if len(c.evidence) == 0 && c.floor.IsZero() {
		s.since = toNanos(w.now()) // nothing recorded: from the resume on
		return
	}
	w.seed(s, c.evidence)
	r.carried = len(c.evidence) > 0
	s.since = toNanos(s.windowStartedAt)
	if f := w.fromRecord(c.floor); f.After(s.windowStartedAt) {
		s.since = toNanos(f)
	}
	if c.stale > 0 && s.cfg.limits.IdleWindow > 0 {
		r.rules.StaleChecks = min(c.stale, s.cfg.limits.SettleChecks-1)
		r.rules.SettleDueAt = w.fromRecord(c.staleAt).Add(s.cfg.limits.SettleInterval)
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
