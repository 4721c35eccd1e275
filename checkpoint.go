package watchdog

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/benbjohnson/clock"
)

// WithCheckpoints makes the Watchdog record, every d on its Clock, the
// evidence of each window it watches whose evidence, calls in flight or
// earliest stop (see Snapshot) changed since its last checkpoint, as a
// KindCheckpoint event with them (at most 4,096 per pass): a Resume
// of the window after a restart, or an adopter, continues the evidence
// rules from the latest one instead of starting them again, and a budget of
// supervised time (Policy.SupervisedOnly) counts the owner alive until
// then. It costs one event per changed window per d through the store.
// Values from 1 ns to 50 ms mean 50 ms; zero or negative, off. Default: off (with a Leaser store the
// heartbeat keeps checkpoints in the store without it).
func WithCheckpoints(d time.Duration) Option {
	return func(c *config) { c.ckptEach = d }
}

// runCheckpoints is the WithCheckpoints goroutine. New arms its first
// period before it returns, so a fake clock advanced at once counts it.
func (w *Watchdog) runCheckpoints(every time.Duration, tick <-chan struct{}, t *clock.Timer) {
	defer w.wg.Done()
	for ok := w.wait(tick, t); ok; ok = w.sleep(every) {
		cps, sns, ss, sums := w.checkpoints(0, 0)
		now := w.now()
		for i, s := range ss {
			e := s.event(KindCheckpoint, now)
			e.EvidenceSummary, e.LimitSeconds = cps[i].Evidence, every.Seconds() // on the timeline (record shifts them); the interval, for what-if
			e.HandlersInFlight, e.CallsInFlight, e.StopAt, e.StopRule = sns[i].CallsInFlight, sns[i].Calls, sns[i].StopAt, sns[i].StopRule
			w.record(nil, e)
			s.ckpt[0].Store(sums[i])
		}
	}
}

// RecordCheckpoint records c, a remote worker's evidence of session
// c.SessionID (each channel's latest instant and counter, named as in the
// session's policy), as a KindCheckpoint event in store, with no owner. An
// instant later than this host's clock is recorded as now. A
// Watchdog that resumes or adopts the window then continues the evidence
// rules from it; the Watchdog watching the window now does not see it
// (evidence reaches a live Session through Touch). c.Window 0 means the
// session's latest window. RecordCheckpoint reads the session's events
// (store.Load) and appends one event: call it at a bounded rate, every few
// seconds while the worker's evidence changes.
//
// It returns an error wrapping ErrInvalidArgument for bad input,
// ErrUnknownSession if the store has no event of the window, the window's
// end cause (as Follow's context would: a *VerdictError or
// ErrSessionStopped) if it has ended, or the store's error.
func RecordCheckpoint(ctx context.Context, store EventStore, c Checkpoint) error {
	if ctx == nil || store == nil {
		return fmt.Errorf("%w: nil context or store", ErrInvalidArgument)
	}
	if err := checkName("session id", c.SessionID); err != nil {
		return fmt.Errorf("%w: checkpoint: %w", ErrInvalidArgument, err)
	}
	if c.Window < 0 || len(c.Evidence) == 0 || len(c.Evidence) > maxChannels {
		return fmt.Errorf("%w: checkpoint of %q: window %d with %d evidence entries (want a window >= 0 and 1 to %d entries)",
			ErrInvalidArgument, c.SessionID, c.Window, len(c.Evidence), maxChannels)
	}
	now := time.Now().UTC()
	ev := make([]EvidenceEntry, len(c.Evidence))
	for i, en := range c.Evidence {
		if err := checkName("channel", en.Channel); err != nil {
			return fmt.Errorf("%w: checkpoint of %q: %w", ErrInvalidArgument, c.SessionID, err)
		}
		for _, prev := range ev[:i] {
			if prev.Channel == en.Channel {
				return fmt.Errorf("%w: checkpoint of %q: channel %q twice", ErrInvalidArgument, c.SessionID, en.Channel)
			}
		}
		ev[i] = EvidenceEntry{Channel: en.Channel, Counter: en.Counter}
		if en.LastAt != nil {
			t := en.LastAt.UTC()
			if t.After(now) { // a worker's clock ahead of this one's proves no later work
				t = now
			}
			ev[i].LastAt = &t
		}
	}
	evs, err := store.Load(ctx, c.SessionID)
	if err != nil {
		return fmt.Errorf("watchdog: checkpoint of %q: load: %w", c.SessionID, err)
	}
	evs = inAppendOrder(evs)
	window := c.Window
	if window == 0 {
		for _, e := range evs {
			window = max(window, e.Window)
		}
	}
	var opening *Event
	for i := range evs {
		e := &evs[i]
		if e.Window != window {
			continue
		}
		if e.Terminal() {
			return causeOf(*e)
		}
		if opening == nil && !e.SessionStartedAt.IsZero() && !e.WindowStartedAt.IsZero() {
			opening = e
		}
	}
	if opening == nil {
		return fmt.Errorf("%w: %q window %d", ErrUnknownSession, c.SessionID, window)
	}
	if p := opening.Policy; p != nil {
		for _, en := range ev {
			if !slices.Contains(builtinChannels[:], en.Channel) && !slices.Contains(p.Channels, en.Channel) {
				return fmt.Errorf("%w: checkpoint of %q: channel %q is not one of the session's", ErrInvalidArgument, c.SessionID, en.Channel)
			}
		}
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	e := Event{
		ID:                      "cp-" + hex.EncodeToString(id[:]),
		AggregateID:             c.SessionID,
		Kind:                    KindCheckpoint,
		Window:                  window,
		SessionStartedAt:        opening.SessionStartedAt,
		WindowStartedAt:         opening.WindowStartedAt,
		OccurredAt:              now,
		ElapsedSeconds:          now.Sub(opening.WindowStartedAt).Seconds(),
		ConfiguredBudgetSeconds: opening.ConfiguredBudgetSeconds,
		EvidenceSummary:         ev,
	}
	if err := store.Append(ctx, e); err != nil {
		return fmt.Errorf("watchdog: checkpoint of %q window %d: %w", c.SessionID, window, err)
	}
	return nil
}

// MaxPayload is the largest payload, in bytes, Session.SaveProgress records.
const MaxPayload = 4096

// SaveProgress records how far the session's work has got, so that a
// worker resumed after a restart continues where it left (read it back with
// LastProgress): progress (a step, an offset, a count) and payload, a small
// JSON value of the worker's own (at most MaxPayload bytes; nil for none),
// as a checkpoint event (KindCheckpoint, fields progress and payload). It
// records one event per call, in order with the window's other events:
// call it at milestones (a finished step, a committed batch), not per
// token. It does not count as evidence of work (Touch does). Progress 0
// with a nil payload is recorded but reads back as nothing saved.
//
// It returns an error wrapping ErrInvalidArgument for a payload that is
// too long or not valid JSON (nothing is recorded), and the window's end
// cause if it has ended (as Stop does: nil after Stop). Safe for
// concurrent use.
func (s *Session) SaveProgress(progress uint64, payload json.RawMessage) error {
	if s == nil {
		return fmt.Errorf("%w: nil session", ErrInvalidArgument)
	}
	if err := checkPayload(payload); err != nil {
		return fmt.Errorf("%w: save progress of %q: %w", ErrInvalidArgument, s.id, err)
	}
	if payload != nil {
		payload = bytes.Clone(payload)
	}
	w := s.w
	now := w.now()
	w.mu.Lock()
	if s.state.Load() != stateRunning {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		return afterEnd(cause)
	}
	r := s.rw()
	r.progress, r.payload = progress, payload
	e := s.event(KindCheckpoint, now)
	e.ProgressValue, e.Payload = progress, payload
	w.record(nil, e)
	w.mu.Unlock()
	return nil
}

// LastProgress returns the progress and payload last saved (SaveProgress)
// in this window or, after a Resume, in an earlier window of the session or
// by the window's earlier owner, as recorded in the store; zero and nil if
// none was. The payload is a copy. Safe for concurrent use.
func (s *Session) LastProgress() (progress uint64, payload json.RawMessage) {
	if s == nil {
		return 0, nil
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.rare == nil {
		return 0, nil
	}
	return s.rare.progress, bytes.Clone(s.rare.payload)
}

// checkPayload reports a payload SaveProgress cannot record.
func checkPayload(p json.RawMessage) error {
	switch {
	case p == nil:
		return nil
	case len(p) > MaxPayload:
		return fmt.Errorf("payload is %d bytes long, at most %d (MaxPayload)", len(p), MaxPayload)
	case !json.Valid(p):
		return fmt.Errorf("payload %s is not valid JSON", quoteShort(string(p)))
	}
	return nil
}
