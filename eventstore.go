package watchdog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"
)

// aggregateType is the aggregate_type of every event the Watchdog records.
const aggregateType = "runtime_control"

// Event kinds. They are part of the public contract: stores, projections and
// post-mortem readers match on them.
const (
	// KindStart opens window 1 of a session (Start, Run).
	KindStart = "runtime.watchdog.start"
	// KindResume re-attaches a session to a Watchdog (Resume). It continues
	// the last window, or opens the next one when the last window ended.
	KindResume = "runtime.watchdog.resume"
	// KindStop is a terminal event: the session ended its window itself
	// (Stop, or Run's function returned).
	KindStop = "runtime.watchdog.stop"
	// KindCancel is a terminal event: the outcome of an acting decision.
	// The watchdog ended the window (cancelled its context, or ran the
	// configured action); decided_by_decision_id links the decision.
	KindCancel = "runtime.watchdog.cancel"
	// KindVerdict records a verdict that did not act: a CONTINUE deferred
	// by fresher evidence (active_channel names the channel), or a stale
	// observation inside the settle window (settle_count of settle_checks).
	KindVerdict = "runtime.watchdog.verdict"
	// KindDecision records a rule's decision to stop the session (verdict
	// HARD_STOP), before any action: mode "act" is followed by a cancel (or
	// superseded, or action_failed) event linked to it; mode "shadow"
	// stops there and the session runs on.
	KindDecision = "runtime.watchdog.decision"
	// KindSuperseded records that an acting decision was not carried out:
	// re-derived at the action's own instant, the verdict no longer acted
	// (fresh evidence arrived in between).
	KindSuperseded = "runtime.watchdog.superseded"
	// KindActionFailed records that the configured action returned an
	// error; the window goes on and the rule is looked at again later.
	KindActionFailed = "runtime.watchdog.action_failed"
	// KindHandlerDeadline records a deadline layer's overrun (handler,
	// iteration or phase): handler, layer, budget (limit_seconds), elapsed
	// (measure_seconds) and dying_span, the step running at the fire.
	KindHandlerDeadline = "runtime.handler.deadline_exceeded"
	// KindHandlerAbandoned records that a function ignored its deadline
	// past the grace period and its goroutine was abandoned.
	KindHandlerAbandoned = "runtime.handler.abandoned"
	// KindCallCompleted records a handler that returned (WithCallRecords,
	// opt-in): handler, layer, measure_seconds (how long it ran),
	// limit_seconds (its cap), progress and progress_at, and reason: "ok",
	// "error" (error holds its text) or the deadline's reason.
	KindCallCompleted = "runtime.handler.completed"
	// KindWaitTimeout records the waiting watchdog's fire (a verdict that
	// does not cancel); generation is the arm that fired.
	KindWaitTimeout = "runtime.watchdog.wait_timeout"
	// KindProcessKilled records the outcome of a kill of a command started
	// with Command, at the end of its grace: reason "sigterm" or
	// "sigkill", processes_alive.
	KindProcessKilled = "runtime.handler.process_killed"
	// KindAttemptCancelled records that a recoverable verdict ended a
	// RunPhase attempt instead of the window.
	KindAttemptCancelled = "runtime.watchdog.attempt_cancelled"
	// KindRetry records that RunPhase retries a phase (attempt is the next
	// attempt, limit_seconds the backoff).
	KindRetry = "runtime.watchdog.retry"
	// KindCheckpoint records a window's evidence (evidence_summary: each
	// channel's latest instant and counter) as its owner saw it
	// (WithCheckpoints) or as a remote worker reported it
	// (RecordCheckpoint, no owner): a Resume or an adoption of the window
	// continues the evidence rules from the latest one.
	KindCheckpoint = "runtime.watchdog.checkpoint"
	// KindRecoveryBudgetExceeded records that a phase's retries ran out.
	KindRecoveryBudgetExceeded = "runtime.watchdog.recovery_budget_exceeded"
)

// Labels of the contract's verdict field (see verdictLabel).
const (
	verdictContinue = "CONTINUE"
	verdictHardStop = "HARD_STOP"
)

// Event is one recorded fact about a session. It marshals to JSON with the
// snake_case field names documented in the README; treat them as a public
// contract. Times are UTC and marshal as RFC 3339 with nanoseconds.
type Event struct {
	// ID is unique per event; stores treat an Append of an ID they already
	// hold as a no-op, which makes retries idempotent.
	ID string `json:"event_id"`
	// Seq is the store's position of the event, assigned by the store on
	// Append (strictly increasing per store). Zero before it is recorded.
	Seq uint64 `json:"seq,omitzero"`
	// AggregateID is the session id.
	AggregateID string `json:"aggregate_id"`
	// Kind is one of the Kind constants.
	Kind string `json:"event_kind"`
	// Window numbers the session's windows from 1; a resume after a
	// terminal event opens the next window.
	Window int `json:"window"`
	// Reason is why the event happened: the verdict's reason on a decision
	// or a cancel ("wall_clock_exceeded"), the stop reason code on a stop
	// ("completed"). The JSON also carries stop_reason_code on terminal
	// events, derived from it: the reason of a stop, "watchdog_" followed
	// by the reason for a cancel.
	Reason string `json:"reason,omitempty"`
	// SessionStartedAt is the session's original start; it never changes
	// across windows, resumes or restarts, except that after a step of the
	// system clock the instants recorded later are shifted by the step
	// (see the README's Reliability section).
	SessionStartedAt time.Time `json:"session_started_at"`
	// WindowStartedAt is when the event's window began.
	WindowStartedAt time.Time `json:"window_started_at"`
	// OccurredAt is when the event happened: the wall-clock reading of the
	// Watchdog's Clock. ElapsedSeconds is measured as elapsed time, not as
	// the difference of two wall-clock readings.
	OccurredAt time.Time `json:"occurred_at"`
	// FiredAt is when the watchdog fired; set on cancel events only.
	FiredAt time.Time `json:"fired_at,omitzero"`
	// ElapsedSeconds is OccurredAt minus WindowStartedAt, in seconds.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// ConfiguredBudgetSeconds is the window's wall-clock budget in seconds.
	ConfiguredBudgetSeconds float64 `json:"configured_budget_seconds"`

	// The fields below are set on verdict, decision and outcome events.

	// Rule is the rule behind the verdict ("wall_clock", "idle", a liveness rule's name, ...).
	Rule string `json:"rule,omitempty"`
	// Mode is the rule's mode on a decision: "act" or "shadow".
	Mode Mode `json:"mode,omitempty"`
	// Recoverable says whether a recovery layer may retry after the
	// rule fired: true for the idle rule only. Set on decisions and
	// cancels.
	Recoverable *bool `json:"recoverable,omitempty"`
	// MeasureSeconds and LimitSeconds are the rule's measure and limit:
	// the window's age and budget for the wall clock, the session's age
	// and ceiling, the cumulative child wait and its ceiling, stdout's
	// silence and the idle window.
	MeasureSeconds float64 `json:"measure_seconds,omitempty"`
	LimitSeconds   float64 `json:"limit_seconds,omitempty"`
	// DecidedByDecisionID links an outcome (cancel, superseded,
	// action_failed) to the event_id of its decision.
	DecidedByDecisionID string `json:"decided_by_decision_id,omitempty"`
	// EvidenceSummary is every channel's evidence at the verdict.
	EvidenceSummary []EvidenceEntry `json:"evidence_summary,omitempty"`
	// ActiveChannel is the channel that justified waiting, or "none".
	ActiveChannel string `json:"active_channel,omitempty"`
	// SettleCount is the idle rule's consecutive stale observations so
	// far, out of SettleChecks.
	SettleCount  int `json:"settle_count,omitempty"`
	SettleChecks int `json:"settle_checks,omitempty"`
	// ChildrenWaitSeconds is the window's cumulative wait on children.
	ChildrenWaitSeconds float64 `json:"children_wait_seconds,omitempty"`
	// Error is the action's error on an action_failed event.
	Error string `json:"error,omitempty"`

	// Handler, Layer and DyingSpan describe a deadline layer's overrun:
	// the layer's name, its kind and the step that was running.
	Handler   string `json:"handler,omitempty"`
	Layer     string `json:"layer,omitempty"`
	DyingSpan string `json:"dying_span,omitempty"`
	// ProgressValue and ProgressAt are set on a deadline event of a call
	// that reported progress (Progress): the last value, and when it last
	// advanced. ProgressValue and Payload are also set on the checkpoint
	// event of Session.SaveProgress (the worker's progress and its payload,
	// JSON of at most MaxPayload bytes) and on a resume event that carried
	// them over from an earlier one (see Session.LastProgress).
	ProgressValue uint64          `json:"progress,omitempty"`
	ProgressAt    time.Time       `json:"progress_at,omitzero"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	// Attempt is set on RunPhase's events (with Handler, the phase's
	// name, and Layer "phase").
	Attempt int `json:"attempt,omitempty"`
	// ProcessesAlive is, on a process_killed event, how many processes of
	// the command (its process group and, on Linux, its process tree) were
	// still alive at the end of the grace and got SIGKILL.
	ProcessesAlive int `json:"processes_alive,omitempty"`
	// Generation is the waiting watchdog's arm on a wait_timeout event.
	Generation uint64 `json:"generation,omitempty"`
	// HandlersInFlight and Waiting are decision inputs on verdict events:
	// in-flight handlers with a deadline (bounded work the idle rule waits
	// for) and the waiting state (which suspends the idle rule).
	HandlersInFlight int  `json:"handlers_in_flight,omitempty"`
	Waiting          bool `json:"waiting,omitempty"`
	// CallsInFlight lists, on verdict, decision and evidence checkpoint
	// events, the handlers (Begin, Call, Within with LayerHandler) of the
	// session that were running, oldest first and at most 100
	// (HandlersInFlight counts them all): which tool calls a verdict waited
	// for or killed. On a deadline record (KindHandlerDeadline) it holds the
	// call (or Within layer) that died, alone, with its start and all its
	// limits, from which Replay re-derives which limit fired; deadline
	// records of earlier versions have none.
	CallsInFlight []CallInFlight `json:"calls_in_flight,omitempty"`
	// StopAt and StopRule are, on an evidence checkpoint, the window's
	// earliest stop and its rule then (Snapshot's); zero and "" if none.
	StopAt   time.Time `json:"stop_at,omitzero"`
	StopRule string    `json:"stop_rule,omitempty"`
	// ObservedSince is a decision input on verdict events: the instant
	// from which the idle rule counts (evidence before it does not count).
	ObservedSince time.Time `json:"observed_since,omitzero"`
	// GraceUntil is a decision input on verdict events: the end of the
	// startup grace, before which the idle rule is not armed unless the
	// baseline speaks. Absent once the baseline has spoken, or without a
	// grace.
	GraceUntil time.Time `json:"grace_until,omitzero"`
	// Policy is the session's policy, recorded on start and resume events
	// so that every later verdict can be re-derived (see Replay).
	Policy *Policy `json:"policy,omitempty"`
	// OpensWindow is set on the event that opens a window: the start event,
	// and a resume event after the previous window ended. A store that
	// arbitrates openings (see Arbiter) keeps one such event per window.
	OpensWindow bool `json:"opens_window,omitempty"`
	// Owner is the Watchdog that recorded the event: its host, process id
	// and a random suffix per New, or its WithEventIDPrefix (see Leaser). Empty in logs of earlier versions.
	Owner string `json:"owner,omitempty"`
	// AdoptedFrom and OwnerLastSeen are set on the resume event of a
	// window adopted from a lost owner: that owner, and its last heartbeat
	// on the store's clock (zero if it sent none).
	AdoptedFrom   string    `json:"adopted_from,omitempty"`
	OwnerLastSeen time.Time `json:"owner_last_seen,omitzero"`
	// BudgetFrom is set on the events of a window whose budget counts
	// supervised time only (Policy.SupervisedOnly) once a resume or an
	// adoption added unsupervised time: the instant the wall-clock budget
	// counts from, later than WindowStartedAt by that time.
	BudgetFrom time.Time `json:"budget_from,omitzero"`
	// By and Why say who ended or changed a window on purpose, and why:
	// on the stop event of Session.StopBy (reason StopRequested), and on
	// the resume event of a window Session.Amend opened (its policy field
	// holds the new policy). Free text of up to 1,024 bytes each.
	By  string `json:"by,omitempty"`
	Why string `json:"why,omitempty"`
	// Extra holds the JSON fields of a decoded event that this version does
	// not know (written by a newer version or another tool). They are kept
	// and written back by MarshalJSON, so a store that round-trips events
	// through JSON loses nothing. A key must not name a field of the
	// contract, even in another case (JSON decoders such as Go's match
	// keys without regard to case, so EVENT_ID would override event_id):
	// Validate and MarshalJSON refuse such a key, and UnmarshalJSON refuses
	// an object that has one.
	Extra map[string]json.RawMessage `json:"-"`
}

// eventFields is Event without its methods, for the JSON codec.
type eventFields Event

// wireEvent is an event as JSON. Besides Event's fields it carries the
// contract's fields that are derived from them, for readers of the log:
// they are written on every encode and recomputed, not trusted, on decode.
// Phase is read only, from logs that named a phase there instead of in
// handler.
type wireEvent struct {
	AggregateType string `json:"aggregate_type"`
	*eventFields
	Verdict        string `json:"verdict,omitempty"`
	StopReasonCode string `json:"stop_reason_code,omitempty"`
	Phase          string `json:"phase,omitempty"`
	// EvidenceSummary, by its depth, stands for Event's: it adds each
	// channel's age_seconds (occurred_at minus last_at).
	EvidenceSummary []evidenceJSON `json:"evidence_summary,omitempty"`
}

// evidenceJSON is an EvidenceEntry as JSON, with its age at the event.
type evidenceJSON struct {
	Channel    string     `json:"channel"`
	LastAt     *time.Time `json:"last_at"`
	AgeSeconds *float64   `json:"age_seconds"`
	Counter    uint64     `json:"counter"`
}

// summaryJSON is e's evidence summary with each channel's age.
func summaryJSON(e *Event) []evidenceJSON {
	if len(e.EvidenceSummary) == 0 {
		return nil
	}
	out := make([]evidenceJSON, len(e.EvidenceSummary))
	ages := make([]float64, len(out))
	for i, en := range e.EvidenceSummary {
		out[i] = evidenceJSON{Channel: en.Channel, LastAt: en.LastAt, Counter: en.Counter}
		if en.LastAt != nil {
			ages[i] = e.OccurredAt.Sub(*en.LastAt).Seconds()
			out[i].AgeSeconds = &ages[i]
		}
	}
	return out
}

// knownEventKeys are the JSON names of wireEvent's fields.
var knownEventKeys = func() map[string]bool {
	keys := make(map[string]bool)
	for _, t := range []reflect.Type{reflect.TypeFor[Event](), reflect.TypeFor[wireEvent]()} {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				keys[name] = true
			}
		}
	}
	return keys
}()

// eventKeyLike returns the field of the contract that k names without
// regard to case (as JSON decoders such as Go's match keys), or "".
func eventKeyLike(k string) string {
	if knownEventKeys[k] {
		return k
	}
	for known := range knownEventKeys {
		if strings.EqualFold(k, known) {
			return known
		}
	}
	return ""
}

// verdictLabel is the contract's verdict field of an event of kind: CONTINUE
// on a verdict the session outlives, HARD_STOP on a decision to end it (or
// a RunPhase attempt) and on the cancel that does.
func verdictLabel(kind string) string {
	switch kind {
	case KindVerdict, KindWaitTimeout:
		return verdictContinue
	case KindDecision, KindCancel, KindAttemptCancelled:
		return verdictHardStop
	}
	return ""
}

// stopReasonCode is the contract's stop_reason_code of a terminal event.
func stopReasonCode(e *Event) string {
	switch {
	case e.Kind == KindStop:
		return e.Reason
	case e.Kind == KindCancel && e.Reason != "":
		return "watchdog_" + e.Reason
	}
	return ""
}

// MarshalJSON encodes e with the contract's snake_case names, plus Extra.
func (e Event) MarshalJSON() ([]byte, error) {
	f := eventFields(e)
	b, err := json.Marshal(wireEvent{aggregateType, &f, verdictLabel(e.Kind), stopReasonCode(&e), "", summaryJSON(&e)})
	if err != nil || len(e.Extra) == 0 {
		return b, err
	}
	keys := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		if known := eventKeyLike(k); known != "" {
			return nil, fmt.Errorf("watchdog: event %s: extra field %q collides with the field %q", e.ID, k, known)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	buf := bytes.NewBuffer(b[:len(b)-1]) // drop the closing brace
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		v := e.Extra[k]
		if !json.Valid(v) {
			return nil, fmt.Errorf("watchdog: event %s: extra field %q is not valid JSON", e.ID, k)
		}
		buf.WriteByte(',')
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON decodes an event, keeping unknown fields in Extra.
func (e *Event) UnmarshalJSON(b []byte) error {
	var f eventFields
	wire := wireEvent{eventFields: &f}
	if err := json.Unmarshal(b, &wire); err != nil {
		return err
	}
	if f.Handler == "" && wire.Phase != "" {
		f.Handler, f.Layer = wire.Phase, string(LayerPhase)
	}
	if len(wire.EvidenceSummary) > 0 {
		f.EvidenceSummary = make([]EvidenceEntry, len(wire.EvidenceSummary))
		for i, en := range wire.EvidenceSummary {
			f.EvidenceSummary[i] = EvidenceEntry{Channel: en.Channel, LastAt: en.LastAt, Counter: en.Counter}
		}
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k := range all {
		if knownEventKeys[k] {
			delete(all, k)
		} else if known := eventKeyLike(k); known != "" {
			return fmt.Errorf("%w: key %q differs from the field %q only in case", ErrInvalidEvent, k, known)
		}
	}
	if len(all) == 0 {
		all = nil
	}
	f.Extra = all
	*e = Event(f)
	return nil
}

// Terminal reports whether e ends its window (a stop or a cancel). A store
// holds at most one terminal event per session window.
func (e Event) Terminal() bool { return e.Kind == KindStop || e.Kind == KindCancel }

// Validate reports what makes e unusable for a store, wrapped in
// ErrInvalidEvent, so that a store accepts exactly what the Watchdog can
// write: an event_id, aggregate_id or event_kind that is empty, longer than
// 1,024 bytes, not valid UTF-8 or holding a NUL byte; any other text field
// (an evidence channel's name included) that is not valid UTF-8 or holds a
// NUL byte; a window below 1; a number that is NaN or infinite; an invalid
// policy; an Extra key that collides with a field (see Extra) or is not
// valid UTF-8. Stores call it in Append.
func (e Event) Validate() error { return e.check(true) }

// check is Validate without a copy of e, checking its policy only when
// withPolicy is set (a store that validated the same policy already).
func (e *Event) check(withPolicy bool) error {
	if err := checkName("event_id", e.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := e.validate(withPolicy); err != nil {
		return fmt.Errorf("%w: event %s: %w", ErrInvalidEvent, quoteShort(e.ID), err)
	}
	return nil
}

func (e *Event) validate(withPolicy bool) error {
	for _, f := range [...]struct{ name, v string }{{"aggregate_id", e.AggregateID}, {"event_kind", e.Kind}} {
		if err := checkName(f.name, f.v); err != nil {
			return err
		}
	}
	if e.Window < 1 {
		return fmt.Errorf("window %d, want >= 1", e.Window)
	}
	for _, f := range [...]struct{ name, v string }{{"reason", e.Reason}, {"rule", e.Rule}, {"mode", string(e.Mode)},
		{"decided_by_decision_id", e.DecidedByDecisionID}, {"active_channel", e.ActiveChannel}, {"error", e.Error},
		{"handler", e.Handler}, {"layer", e.Layer}, {"dying_span", e.DyingSpan}, {"owner", e.Owner}, {"adopted_from", e.AdoptedFrom}, {"by", e.By}, {"why", e.Why}} {
		if err := checkText(f.name, f.v); err != nil {
			return err
		}
	}
	for _, en := range e.EvidenceSummary {
		if err := checkText("evidence channel", en.Channel); err != nil {
			return err
		}
	}
	for _, c := range e.CallsInFlight {
		if err := checkText("call in flight", c.Name+string(c.Layer)); err != nil {
			return err
		}
	}
	if err := checkPayload(e.Payload); err != nil {
		return err
	}
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"elapsed_seconds", e.ElapsedSeconds}, {"configured_budget_seconds", e.ConfiguredBudgetSeconds},
		{"measure_seconds", e.MeasureSeconds}, {"limit_seconds", e.LimitSeconds}, {"children_wait_seconds", e.ChildrenWaitSeconds}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s is %v", f.name, f.v)
		}
	}
	if e.Policy != nil && withPolicy {
		if err := e.Policy.Validate(); err != nil {
			return err
		}
	}
	return checkExtra(e.Extra)
}

// EventStore records events. Implementations must be safe for concurrent use.
//
// Append records events atomically, in order: all of them or none. An event
// whose ID the store already holds is skipped (idempotent retry). A terminal
// event (see Event.Terminal) for a session window that already has a
// different terminal event must be refused with an error wrapping
// ErrAlreadyDecided: this is how exactly one cancel per window holds across
// Watchdog instances and processes. An invalid event, or one the store can
// never keep (text too long for an index, or that its encoding cannot
// hold), is refused with an error wrapping ErrInvalidEvent that names it by
// event_id. Such a refusal is for good: an error that a retry may cure must
// not wrap ErrInvalidEvent. A batch holding the event is refused whole; its
// other events, appended without it, are recorded.
//
// Load returns every event of one aggregate (session) in append order, or an
// empty slice when there is none.
type EventStore interface {
	Append(ctx context.Context, events ...Event) error
	Load(ctx context.Context, aggregateID string) ([]Event, error)
}

// EachAppender is an optional interface of an EventStore that records a
// batch of independent events in one call: the Watchdog's recorder then
// writes what it has queued (events of many sessions) in one call instead
// of one call per event. It must be safe for concurrent use.
//
// AppendEach records each event as an Append of that event alone would,
// in order, and returns nil when every event is recorded (or was already
// held), else len(events) errors, one per event, nil for each recorded. A
// refusal affects its own event only: a terminal event for a window that
// already has another one gets an error wrapping ErrAlreadyDecided, and an
// event refused for good one wrapping ErrInvalidEvent, while the rest of
// the batch is recorded. Any other error is transient, and then the later
// events of the same aggregate must not be recorded either (they get an
// error too), so that each session's events are recorded in order; a
// failure of the whole call (a lost connection) gives every event its
// error. The slice is the caller's again when AppendEach returns.
type EachAppender interface {
	AppendEach(ctx context.Context, events []Event) []error
}

// Arbiter is an optional interface of an EventStore that several processes
// share, such as the PostgreSQL store. When Arbitrates reports true, the
// store keeps at most one event that opens a window (see
// Event.OpensWindow) per session window: it refuses another, in Append and
// in AppendEach, with an error wrapping ErrAlreadyWatched that names the
// event that opened the window (an event_id it holds is still skipped, as
// a retry). Start and Resume then wait for the store's answer before they
// return (bounded by their context), so that of two processes that open
// the same window exactly one watches it. Without an Arbiter (the
// MemoryStore, the file store, which one process at a time can open) they
// never wait for the store. Arbitrates is called once, by New.
type Arbiter interface {
	Arbitrates() bool
}

// Subscriber is an optional interface of an EventStore: Subscribe delivers,
// in order, every event appended for aggregateID after Subscribe returns,
// until ctx ends; then the channel is closed. A slow reader never blocks
// Append. Follow uses it for cooperative cancellation across components.
type Subscriber interface {
	Subscribe(ctx context.Context, aggregateID string) (<-chan Event, error)
}

var _ interface {
	EventStore
	Subscriber
} = (*MemoryStore)(nil)
