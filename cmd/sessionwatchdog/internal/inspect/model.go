// Package inspect turns a watchdog event log into per-session timelines and
// renders them as text, JSON or a self-contained HTML page. It knows the
// event kinds of the watchdog package and shows any other kind generically
// (its reason and fields), so a log written by a newer version never makes
// it fail.
package inspect

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Filter selects the events to show. A zero Filter selects everything.
type Filter struct {
	// Sessions keeps only these session ids (aggregate_id), if non-empty.
	Sessions []string
	// Kinds keeps only these event kinds, if non-empty. A kind matches its
	// full name ("runtime.watchdog.cancel") or its last dotted part
	// ("cancel", "deadline_exceeded").
	Kinds []string
	// Since and Until keep events whose occurred_at is within
	// [Since, Until]; a zero bound is open.
	Since, Until time.Time
}

// Match reports whether e passes the filter.
func (f Filter) Match(e watchdog.Event) bool {
	if len(f.Sessions) > 0 && !contains(f.Sessions, e.AggregateID) {
		return false
	}
	if len(f.Kinds) > 0 {
		ok := false
		for _, k := range f.Kinds {
			if kindMatches(e.Kind, k) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if !f.Since.IsZero() && e.OccurredAt.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && e.OccurredAt.After(f.Until) {
		return false
	}
	return true
}

func kindMatches(kind, want string) bool {
	return kind == want || strings.HasSuffix(kind, "."+want)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Report is the inspection of one event log.
type Report struct {
	// Sessions are the sessions with at least one selected event, in the
	// order of their first event in the log.
	Sessions []Session `json:"sessions"`
}

// Session is the timeline of one session.
type Session struct {
	// ID is the session id (aggregate_id).
	ID string `json:"session_id"`
	// StartedAt is the session's session_started_at (from its first event
	// that carries one); zero when none does.
	StartedAt time.Time `json:"session_started_at"`
	// Windows are the window numbers seen, ascending.
	Windows []int `json:"windows"`
	// Channels are the evidence channels named in the session's evidence
	// summaries, in their recorded order.
	Channels []string `json:"channels"`
	// Final describes the last terminal event shown (stop or cancel), or
	// is empty when the shown events contain none.
	Final string `json:"final,omitempty"`
	// Timeline holds the session's selected events, in log order.
	Timeline []Entry `json:"timeline"`
}

// Entry is one event of a timeline.
type Entry struct {
	// Label is a short name for the event: "start", "CONTINUE", "stale 2/3",
	// "DECISION act", "cancel", or the kind for kinds this version does
	// not know.
	Label string `json:"label"`
	// Summary is a one-line human description of the event.
	Summary string `json:"summary"`
	// Known is false for an event kind this version does not know.
	Known bool `json:"known_kind"`
	// Ages are the per-channel evidence ages at the event (from its
	// evidence_summary), in channel order; empty when it has none.
	Ages []ChannelAge `json:"channel_ages,omitempty"`
	// Event is the recorded event, with every field.
	Event watchdog.Event `json:"event"`
}

// ChannelAge is one channel's evidence at a verdict.
type ChannelAge struct {
	// Channel is the channel's name.
	Channel string `json:"channel"`
	// AgeSeconds is how old its latest evidence was; nil if it had none.
	AgeSeconds *float64 `json:"age_seconds"`
	// LastAt is when its latest evidence was recorded; nil if none.
	LastAt *time.Time `json:"last_at"`
	// Counter counts the distinct instants with evidence.
	Counter uint64 `json:"counter"`
}

// Build groups the events that pass f by session, in log order.
func Build(events []watchdog.Event, f Filter) Report {
	idx := make(map[string]int)
	var r Report
	for _, e := range events {
		if !f.Match(e) {
			continue
		}
		i, ok := idx[e.AggregateID]
		if !ok {
			i = len(r.Sessions)
			idx[e.AggregateID] = i
			r.Sessions = append(r.Sessions, Session{ID: e.AggregateID, StartedAt: e.SessionStartedAt, Windows: []int{}, Channels: []string{}})
		}
		s := &r.Sessions[i]
		if s.StartedAt.IsZero() {
			s.StartedAt = e.SessionStartedAt // a start only later events carry
		}
		if !containsInt(s.Windows, e.Window) {
			s.Windows = append(s.Windows, e.Window)
			sort.Ints(s.Windows)
		}
		for _, ev := range e.EvidenceSummary {
			if !contains(s.Channels, ev.Channel) {
				s.Channels = append(s.Channels, ev.Channel)
			}
		}
		en := describe(e)
		if e.Terminal() {
			s.Final = fmt.Sprintf("window %d: %s", e.Window, en.Summary)
		}
		s.Timeline = append(s.Timeline, en)
	}
	return r
}

// origin is the instant the offsets of s's events count from: its start,
// or, when no event carries it, its earliest event.
func (s Session) origin() time.Time {
	o := s.StartedAt
	for _, en := range s.Timeline {
		if t := en.Event.OccurredAt; s.StartedAt.IsZero() && !t.IsZero() && (o.IsZero() || t.Before(o)) {
			o = t
		}
	}
	return o
}

// started says when s started, or that no event says.
func (s Session) started() string {
	if s.StartedAt.IsZero() {
		return "start unknown (offsets from the first event)"
	}
	return "started " + stamp(s.StartedAt)
}

func containsInt(list []int, n int) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// describe labels and summarises one event.
func describe(e watchdog.Event) Entry {
	en := Entry{Event: e, Known: true}
	for _, ev := range e.EvidenceSummary {
		en.Ages = append(en.Ages, ChannelAge{Channel: ev.Channel, AgeSeconds: age(e, ev), LastAt: ev.LastAt, Counter: ev.Counter})
	}
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	switch e.Kind {
	case watchdog.KindStart:
		en.Label = "start"
		add("window %d, budget %s", e.Window, secs(e.ConfiguredBudgetSeconds))
		addFleet(&parts, e)
		addPolicy(&parts, e)
	case watchdog.KindResume:
		en.Label = "resume"
		add("window %d started %s, budget %s", e.Window, stamp(e.WindowStartedAt), secs(e.ConfiguredBudgetSeconds))
		addFleet(&parts, e)
		addSaved(&parts, e)
		addPolicy(&parts, e)
	case watchdog.KindStop:
		en.Label = "stop"
		add("%s", orDash(e.Reason))
		if e.By != "" {
			add("stopped by %s: %s", e.By, orDash(e.Why))
		}
		add("after %s in window %d", secs(e.ElapsedSeconds), e.Window)
	case watchdog.KindVerdict:
		en.Label = "CONTINUE"
		if e.SettleChecks > 0 {
			en.Label = fmt.Sprintf("stale %d/%d", e.SettleCount, e.SettleChecks)
		}
		add("rule %s: %s", orDash(e.Rule), measure(e))
		if e.SettleChecks > 0 {
			add("stale observation %d of %d, no fresh evidence (active_channel %s)", e.SettleCount, e.SettleChecks, orDash(e.ActiveChannel))
		} else {
			add("waiting: %s", activeAge(e))
		}
	case watchdog.KindDecision:
		en.Label = "DECISION " + orDash(string(e.Mode))
		add("HARD_STOP by rule %s: %s", orDash(e.Rule), orDash(e.Reason))
		add("%s", measure(e))
		if e.Recoverable != nil {
			add("recoverable=%t", *e.Recoverable)
		}
		if e.Mode == watchdog.ModeShadow {
			add("shadow: advice only, nothing done")
		}
		if e.SettleChecks > 0 {
			add("after %d/%d stale observations", e.SettleCount, e.SettleChecks)
		}
	case watchdog.KindCancel:
		en.Label = "cancel"
		add("%s", orDash(e.Reason))
		if !e.FiredAt.IsZero() {
			add("fired %s", stamp(e.FiredAt))
		}
		add("decided by %s", orDash(e.DecidedByDecisionID))
	case watchdog.KindSuperseded:
		en.Label = "superseded"
		add("decision %s not carried out: fresh evidence before the action", orDash(e.DecidedByDecisionID))
	case watchdog.KindActionFailed:
		en.Label = "action_failed"
		add("action for decision %s failed: %s", orDash(e.DecidedByDecisionID), orDash(e.Error))
	case watchdog.KindHandlerDeadline:
		en.Label = "deadline " + orDash(e.Layer)
		if strings.HasSuffix(e.Rule, "_idle") {
			en.Label = "idle " + orDash(e.Layer)
			add("%s %q made no progress for %s of idle budget %s", orDash(e.Layer), e.Handler, secs(e.MeasureSeconds), secs(e.LimitSeconds))
		} else {
			add("%s %q overran: elapsed %s of budget %s", orDash(e.Layer), e.Handler, secs(e.MeasureSeconds), secs(e.LimitSeconds))
		}
		if !e.ProgressAt.IsZero() {
			add("last progress %d at %s (%s before)", e.ProgressValue, stamp(e.ProgressAt), secs(e.OccurredAt.Sub(e.ProgressAt).Seconds()))
		}
		add("dying span %s", orDash(quoted(e.DyingSpan)))
		if e.Reason != "" {
			add("reason %s", e.Reason)
		}
	case watchdog.KindHandlerAbandoned:
		en.Label = "abandoned " + orDash(e.Layer)
		add("%s %q ignored its deadline past the grace: abandoned after %s (budget+grace %s)", orDash(e.Layer), e.Handler, secs(e.MeasureSeconds), secs(e.LimitSeconds))
		add("dying span %s", orDash(quoted(e.DyingSpan)))
	case watchdog.KindProcessKilled:
		en.Label = "process killed"
		if e.Reason == "sigkill" {
			add("command %s: %d process(es) outlived the %s grace after SIGTERM and were sent SIGKILL", quoted(e.Handler), e.ProcessesAlive, secs(e.LimitSeconds))
		} else {
			add("command %s: every process exited within the %s grace after SIGTERM", quoted(e.Handler), secs(e.LimitSeconds))
		}
	case watchdog.KindCallCompleted:
		en.Label = "call done"
		if e.Reason == "error" {
			en.Label = "call failed"
		}
		s := fmt.Sprintf("%s %s ran %s of cap %s: %s", orDash(e.Layer), quoted(e.Handler), secs(e.MeasureSeconds), secs(e.LimitSeconds), orDash(e.Reason))
		if e.Error != "" {
			s += " (" + e.Error + ")"
		}
		add("%s", s)
		if !e.ProgressAt.IsZero() {
			add("last progress %d at %s", e.ProgressValue, stamp(e.ProgressAt))
		}
	case watchdog.KindWaitTimeout:
		en.Label = "wait_timeout"
		add("waited %s of timeout %s (generation %d): callback, no cancel", secs(e.MeasureSeconds), secs(e.LimitSeconds), e.Generation)
	case watchdog.KindAttemptCancelled:
		en.Label = "attempt cancelled"
		add("phase %s attempt %d ended by %s", orDash(quoted(e.Handler)), e.Attempt, orDash(e.Reason))
	case watchdog.KindRetry:
		en.Label = "retry"
		add("phase %s: attempt %d after backoff %s (%s)", orDash(quoted(e.Handler)), e.Attempt, secs(e.LimitSeconds), orDash(e.Reason))
	case watchdog.KindCheckpoint:
		en.Label = "checkpoint"
		by := "a remote worker"
		if e.Owner != "" {
			by = "owner " + e.Owner
		}
		if len(e.EvidenceSummary) > 0 || (e.ProgressValue == 0 && e.Payload == nil) {
			add("evidence of window %d as %s saw it", e.Window, by)
		}
		addSaved(&parts, e)
	case watchdog.KindRecoveryBudgetExceeded:
		en.Label = "recovery budget exceeded"
		add("phase %s: retries ran out at attempt %d (%s)", orDash(quoted(e.Handler)), e.Attempt, orDash(e.Reason))
	default:
		en.Known = false
		en.Label = strings.TrimPrefix(e.Kind, "runtime.")
		parts = append(parts, genericFields(e)...)
	}
	if en.Known {
		if e.HandlersInFlight > 0 {
			add("handlers in flight %d", e.HandlersInFlight)
		}
		if e.Waiting {
			add("waiting")
		}
		for _, k := range sortedKeys(e.Extra) {
			add("%s=%s", k, compact(e.Extra[k]))
		}
	}
	addCalls(&parts, e)
	en.Summary = strings.Join(parts, "; ")
	return en
}

// addCalls appends the calls that were running at a verdict: name, layer,
// age, limits and last progress.
func addCalls(parts *[]string, e watchdog.Event) {
	for _, c := range e.CallsInFlight {
		s := fmt.Sprintf("call in flight %s (%s, running %s, cap %s", quoted(c.Name), orDash(string(c.Layer)),
			secs(e.OccurredAt.Sub(c.StartedAt).Seconds()), secs(c.BudgetSeconds))
		if c.IdleSeconds > 0 {
			s += ", idle " + secs(c.IdleSeconds)
		}
		if !c.ProgressAt.IsZero() {
			s += fmt.Sprintf(", progress %d %s ago", c.Progress, secs(e.OccurredAt.Sub(c.ProgressAt).Seconds()))
		} else {
			s += ", no progress"
		}
		*parts = append(*parts, s+")")
	}
	if n := e.HandlersInFlight - len(e.CallsInFlight); n > 0 && len(e.CallsInFlight) > 0 {
		*parts = append(*parts, fmt.Sprintf("and %d more call(s) in flight, not listed", n))
	}
}

// addSaved appends the progress a worker saved (SaveProgress), on its
// checkpoint and on a resume that carried it over.
func addSaved(parts *[]string, e watchdog.Event) {
	if e.ProgressValue == 0 && e.Payload == nil {
		return
	}
	s := fmt.Sprintf("progress saved: %d", e.ProgressValue)
	if e.Payload != nil {
		s += ", payload " + string(e.Payload)
	}
	*parts = append(*parts, s)
}

// addPolicy appends the recorded policy (start and resume events), as JSON.
// addFleet describes who opened or took over the window: its owner, an
// adoption from a lost owner (with when it was last seen and the evidence
// the adopter continued from, or that it started again), an amend.
func addFleet(parts *[]string, e watchdog.Event) {
	if e.Owner != "" {
		*parts = append(*parts, "owner "+e.Owner)
	}
	if e.AdoptedFrom != "" {
		s := "adopted from " + e.AdoptedFrom
		if !e.OwnerLastSeen.IsZero() {
			s += " (last seen " + stamp(e.OwnerLastSeen) + ")"
		}
		*parts = append(*parts, s)
	}
	if e.Kind == watchdog.KindResume && !e.OpensWindow {
		switch {
		case len(e.EvidenceSummary) > 0:
			*parts = append(*parts, "evidence continued from the window's records")
		case !e.ObservedSince.IsZero():
			*parts = append(*parts, "nothing recorded: evidence counted again from here")
		}
	}
	if !e.BudgetFrom.IsZero() {
		*parts = append(*parts, "budget counts supervised time, from "+stamp(e.BudgetFrom))
	}
	if e.By != "" {
		*parts = append(*parts, fmt.Sprintf("policy amended by %s: %s", e.By, orDash(e.Why)))
	}
}

func addPolicy(parts *[]string, e watchdog.Event) {
	if e.Policy == nil {
		return
	}
	if root := e.Policy.WorkspaceRoot; root != "" {
		ign := e.Policy.WorkspaceIgnore
		if len(ign) == 0 {
			ign = []string{".git"}
		}
		s := fmt.Sprintf("workspace %s watched, ignoring %s", quoted(root), strings.Join(ign, ", "))
		if slices.ContainsFunc(ign, func(p string) bool { ok, _ := path.Match(strings.TrimSuffix(p, "/"), ".git"); return ok }) {
			s += " (the top level of .git still watched: git operations count)"
		}
		*parts = append(*parts, s)
	}
	b, err := json.Marshal(e.Policy)
	if err != nil {
		*parts = append(*parts, "policy unprintable: "+err.Error())
		return
	}
	*parts = append(*parts, "policy "+string(b))
}

// measure describes the rule's measure against its limit.
func measure(e watchdog.Event) string {
	what := map[string]string{
		"wall_clock":      "window age",
		"session_ceiling": "session age",
		"children_wait":   "children wait",
		"idle":            "stdout silent",
	}[e.Rule]
	if what == "" {
		what = "measure"
	}
	return fmt.Sprintf("%s %s of limit %s", what, secs(e.MeasureSeconds), secs(e.LimitSeconds))
}

// activeAge names the channel that justified waiting, with its age.
func activeAge(e watchdog.Event) string {
	if e.ActiveChannel == "" || e.ActiveChannel == "none" {
		return "no active channel"
	}
	for _, ev := range e.EvidenceSummary {
		if a := age(e, ev); ev.Channel == e.ActiveChannel && a != nil {
			return fmt.Sprintf("active_channel %s (evidence %s old)", e.ActiveChannel, secs(*a))
		}
	}
	return "active_channel " + e.ActiveChannel
}

// envelope are the fields every event has; a generic summary leaves them out.
var envelope = map[string]bool{
	"event_id": true, "seq": true, "aggregate_type": true, "aggregate_id": true, "event_kind": true,
	"window": true, "session_started_at": true, "window_started_at": true, "occurred_at": true,
	"elapsed_seconds": true, "configured_budget_seconds": true,
}

// genericFields lists every field of an event of a kind this version does
// not know, as key=value in key order, reason first: whatever a newer core
// records is shown.
func genericFields(e watchdog.Event) []string {
	b, err := json.Marshal(e)
	if err != nil {
		return []string{"unprintable: " + err.Error()}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return []string{"unprintable: " + err.Error()}
	}
	var out []string
	if r, ok := m["reason"]; ok {
		out = append(out, "reason "+strings.Trim(string(r), `"`))
	}
	for _, k := range sortedKeys(m) {
		if !envelope[k] && k != "reason" {
			out = append(out, k+"="+compact(m[k]))
		}
	}
	return out
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func quoted(s string) string {
	if s == "" {
		return ""
	}
	return strconv.Quote(s)
}

func compact(b []byte) string {
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func orDash(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return "-"
}

// secs formats a number of seconds compactly: "10s", "2.5s", "1h0m0s".
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Millisecond)
	return d.String()
}

// stamp formats an instant in UTC with milliseconds.
func stamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// age is how old a channel's latest evidence was at the event: nil if it
// had none.
func age(e watchdog.Event, ev watchdog.EvidenceEntry) *float64 {
	if ev.LastAt == nil {
		return nil
	}
	a := e.OccurredAt.Sub(*ev.LastAt).Seconds()
	return &a
}
