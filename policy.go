package watchdog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/decide"
	"github.com/sessionwatchdog/watchdog/internal/seconds"
)

// Defaults of the Policy fields whose zero value means a default (see
// each field; the first two are the seeds' defaults).
const (
	defaultWallClock      = 4 * time.Hour    // WallClock
	defaultEvidenceTTL    = 30 * time.Second // EvidenceTTL
	defaultSettleChecks   = 3                // SettleChecks (Kubernetes' failureThreshold)
	defaultSettleInterval = 10 * time.Second // SettleInterval
)

// Off, as Policy.EvidenceTTL, turns idle deferral off: only the baseline
// channel (stdout) counts, the seeds' legacy behaviour. In JSON it is written
// as agent_idle_activity_evidence_ttl_seconds: 0.
const Off time.Duration = -1

// Mode says whether a rule acts or only advises.
type Mode string

const (
	// ModeAct records the decision, then acts (cancels the session or runs
	// the configured action) and records the outcome. The default.
	ModeAct Mode = "act"
	// ModeShadow records the decision and does nothing else, so a team can
	// measure false positives before it lets the watchdog kill.
	ModeShadow Mode = "shadow"
)

// maxChannels is the most evidence channels a session can have: the four
// built-in ones plus Policy.Channels.
const maxChannels = 16

// Policy holds the per-session limits. It is plain data: it marshals to JSON
// with the seeds' knob names, a zero field means its documented default, and
// Validate reports bad values. A Policy is passed by value to Start, Resume
// and Run; the Watchdog keeps its own resolved copy.
//
// Durations are JSON numbers of seconds (10, 1.5), read and written
// exactly: every duration round-trips to the nanosecond. A string (even
// "10" or "10s"), a value that is not a whole number of nanoseconds (1e-10)
// or does not fit a time.Duration, and any value of the wrong type are
// refused with an error naming the knob (ErrInvalidPolicy). A negative
// duration is invalid, except EvidenceTTL's Off.
type Policy struct {
	// WallClock is the budget of one window of the session, measured from
	// the window's start (the session's start for window 1, the resume
	// moment for a window opened after a terminal event). The session
	// fires when now - window start > WallClock. Zero means
	// four hours. JSON: session_wall_clock_seconds.
	WallClock time.Duration

	// SessionCeiling is the maximum session duration, measured from
	// session_started_at across all windows. Absolute: no evidence extends
	// it. Zero means none. JSON: session_ceiling_seconds.
	SessionCeiling time.Duration

	// ChildrenWaitCeiling caps the time a window spends waiting on
	// children (Session.BeginChildWait): the time during which at least
	// one wait is open, so nested and concurrent waits count once.
	// Absolute. Zero means none. JSON: children_wait_ceiling_seconds.
	ChildrenWaitCeiling time.Duration

	// IdleWindow is the idle rule's window (the seeds' NO_OUTPUT_DEADLINE):
	// once the baseline channel (stdout) has been silent for more than
	// IdleWindow, with no fresher evidence elsewhere, each look is a stale
	// observation, and the rule acts at the SettleChecks-th consecutive
	// one. A silent session is therefore stopped IdleWindow +
	// (SettleChecks-1) x SettleInterval after its last output at the
	// earliest: with the defaults, 20 s after the window. Zero turns the
	// idle rule off. JSON: no_output_deadline_seconds.
	IdleWindow time.Duration

	// EvidenceTTL defers an idle fire while any non-baseline channel's
	// latest evidence is at most EvidenceTTL old. Zero means 30 s; Off
	// turns deferral off (stdout only). JSON:
	// agent_idle_activity_evidence_ttl_seconds, where -1 means Off (0 too,
	// as older versions wrote it) and an absent field the default.
	EvidenceTTL time.Duration

	// StartupGrace keeps the idle rule unarmed until the session's first
	// baseline output or StartupGrace after the window's start, whichever
	// is first. Zero means none. JSON: startup_grace_seconds.
	StartupGrace time.Duration

	// MaxIdleDeferral caps how long evidence may defer one idle episode:
	// past it, silence on stdout is fatal even with fresh evidence
	// elsewhere. Zero means no cap. JSON: max_idle_deferral_seconds.
	MaxIdleDeferral time.Duration

	// SettleChecks is how many consecutive stale observations, spaced by
	// SettleInterval, the idle rule needs before it acts; one fresh
	// observation resets the count. The wall clock and the ceilings never
	// wait. Zero means 3 (Kubernetes' failureThreshold). JSON: settle_checks.
	SettleChecks int

	// SettleInterval spaces the idle rule's stale observations. Zero means
	// 10 s. JSON: settle_interval_seconds.
	SettleInterval time.Duration

	// Mode is the mode of every rule without an entry in RuleModes. Empty
	// means ModeAct. JSON: mode.
	Mode Mode

	// RuleModes sets the mode of single rules, keyed by a rule's name ("wall_clock",
	// "session_ceiling", "children_wait" or "idle". JSON: rule_modes.
	RuleModes map[string]Mode

	// Channels names evidence channels beyond the four built-in ones
	// (stdout, mcp_tool, subagent, workspace). Session.Channel maps a name
	// to its Channel. Like every name (see Watchdog.Start), a channel's is 1
	// to 1,024 bytes of valid UTF-8 without a NUL byte. JSON:
	// evidence_channels.
	Channels []string

	// PhaseBudgets declares per-phase budgets, phase name to budget, used
	// by RunPhase and Within(LayerPhase) when the call gives none. JSON:
	// phase_budgets_seconds.
	PhaseBudgets map[string]time.Duration

	// IterationBudget is the budget of Within(LayerIteration) when the
	// call gives none. Zero means none. JSON: iteration_budget_seconds.
	IterationBudget time.Duration

	// HandlerGrace is how long a deadline layer waits after its deadline
	// for the function to return before abandoning it. Zero means
	// 5 s. JSON: handler_grace_seconds.
	HandlerGrace time.Duration

	// RecoveryBudget is how many times RunPhase retries a phase that ended
	// with a recoverable verdict. Zero means 2; a negative value (-1)
	// turns retries off. JSON: recovery_budget.
	RecoveryBudget int

	// RecoveryBackoff is the wait before the first retry, doubling for
	// each further one. Zero means 1 s. JSON: recovery_backoff_seconds.
	RecoveryBackoff time.Duration

	// LivenessRules declares liveness rules of your own, by name, that
	// Session.ReportLiveness feeds; RuleModes may set their modes. The
	// names must not be the built-in rules'. JSON: liveness_rules.
	LivenessRules []string

	// ContinueWhenOwnerLost says what a fleet member that adopts the
	// window from a lost owner does (see WithAdoption): false (the
	// default), for agents that were children of the owner and died with
	// it, ends the window at once with a stop, reason owner_lost; true, for
	// agents that run elsewhere and follow the session, keeps watching it
	// under this policy: the wall clock and the ceilings count from the
	// recorded instants (and decide at once if already due), while the
	// evidence rules continue from the owner's last evidence checkpoint
	// (or start again at the adoption if there is none). JSON:
	// continue_when_owner_lost.
	ContinueWhenOwnerLost bool

	// SupervisedOnly makes WallClock count supervised time only: time a
	// Watchdog owned the window. When an open window is resumed (or
	// adopted) after its owner was lost, the gap since the owner's last sign
	// of life (its last record of the window; for an adoption, its last
	// heartbeat if later) is added to the budget, and the window's later
	// events record the instant the budget counts from (budget_from). For
	// agents that pause while no orchestrator runs; keep the default, false
	// (wall-clock time), for agents that run on whether watched or not. It is
	// measured to within the owner's record rate: a while with no record
	// before the owner was lost makes the gap, and the budget, longer. The
	// session ceiling always counts wall-clock time. JSON:
	// wall_clock_supervised_only.
	SupervisedOnly bool

	// WorkspaceRoot declares the session's workspace: an absolute
	// directory whose file changes (git's included) are evidence
	// (ChannelWorkspace), watched from Start or Resume to the window's end
	// as Session.WatchWorkspace does, with WorkspaceIgnore's patterns (none:
	// ".git"). Start and Resume fail if it cannot be watched, so that no
	// session runs without it, and the start or resume record's policy says
	// which directory was watched and what was ignored. An adopter that
	// continues the window (ContinueWhenOwnerLost) watches it if it can
	// and logs a warning if not. Empty (the default): none. JSON:
	// workspace_root.
	WorkspaceRoot string

	// WorkspaceIgnore are WorkspaceRoot's ignore patterns (see
	// Session.WatchWorkspace). JSON: workspace_ignore.
	WorkspaceIgnore []string
}

type policyJSON struct {
	WallClock       json.RawMessage            `json:"session_wall_clock_seconds,omitempty"`
	SessionCeiling  json.RawMessage            `json:"session_ceiling_seconds,omitempty"`
	ChildrenWait    json.RawMessage            `json:"children_wait_ceiling_seconds,omitempty"`
	IdleWindow      json.RawMessage            `json:"no_output_deadline_seconds,omitempty"`
	EvidenceTTL     *json.RawMessage           `json:"agent_idle_activity_evidence_ttl_seconds,omitempty"`
	StartupGrace    json.RawMessage            `json:"startup_grace_seconds,omitempty"`
	MaxIdleDeferral json.RawMessage            `json:"max_idle_deferral_seconds,omitempty"`
	SettleChecks    int                        `json:"settle_checks,omitempty"`
	SettleInterval  json.RawMessage            `json:"settle_interval_seconds,omitempty"`
	Mode            Mode                       `json:"mode,omitempty"`
	RuleModes       map[string]Mode            `json:"rule_modes,omitempty"`
	Channels        []string                   `json:"evidence_channels,omitempty"`
	PhaseBudgets    map[string]json.RawMessage `json:"phase_budgets_seconds,omitempty"`
	IterationBudget json.RawMessage            `json:"iteration_budget_seconds,omitempty"`
	HandlerGrace    json.RawMessage            `json:"handler_grace_seconds,omitempty"`
	RecoveryBudget  int                        `json:"recovery_budget,omitempty"`
	RecoveryBackoff json.RawMessage            `json:"recovery_backoff_seconds,omitempty"`
	LivenessRules   []string                   `json:"liveness_rules,omitempty"`
	Continue        bool                       `json:"continue_when_owner_lost,omitempty"`
	SupervisedOnly  bool                       `json:"wall_clock_supervised_only,omitempty"`
	WorkspaceRoot   string                     `json:"workspace_root,omitempty"`
	WorkspaceIgnore []string                   `json:"workspace_ignore,omitempty"`
}

// durationKnob is a plain duration field of Policy beside its JSON knob.
type durationKnob struct {
	key string
	d   *time.Duration
	s   *json.RawMessage
}

// durations pairs p's plain duration fields with j's, by knob: the one list
// that the codec and Validate share.
func (j *policyJSON) durations(p *Policy) []durationKnob {
	return []durationKnob{
		{"session_wall_clock_seconds", &p.WallClock, &j.WallClock},
		{"session_ceiling_seconds", &p.SessionCeiling, &j.SessionCeiling},
		{"children_wait_ceiling_seconds", &p.ChildrenWaitCeiling, &j.ChildrenWait},
		{"no_output_deadline_seconds", &p.IdleWindow, &j.IdleWindow},
		{"startup_grace_seconds", &p.StartupGrace, &j.StartupGrace},
		{"max_idle_deferral_seconds", &p.MaxIdleDeferral, &j.MaxIdleDeferral},
		{"settle_interval_seconds", &p.SettleInterval, &j.SettleInterval},
		{"iteration_budget_seconds", &p.IterationBudget, &j.IterationBudget},
		{"handler_grace_seconds", &p.HandlerGrace, &j.HandlerGrace},
		{"recovery_backoff_seconds", &p.RecoveryBackoff, &j.RecoveryBackoff},
	}
}

// MarshalJSON encodes p with the seeds' knob names; durations are seconds,
// zero fields are omitted, and Off is written as -1.
func (p Policy) MarshalJSON() ([]byte, error) {
	j := policyJSON{SettleChecks: p.SettleChecks, Mode: p.Mode, RuleModes: p.RuleModes, Channels: p.Channels,
		RecoveryBudget: p.RecoveryBudget, LivenessRules: p.LivenessRules, Continue: p.ContinueWhenOwnerLost,
		SupervisedOnly: p.SupervisedOnly, WorkspaceRoot: p.WorkspaceRoot, WorkspaceIgnore: p.WorkspaceIgnore}
	for _, f := range j.durations(&p) {
		if *f.d != 0 {
			*f.s = seconds.Format(*f.d)
		}
	}
	if len(p.PhaseBudgets) > 0 {
		j.PhaseBudgets = make(map[string]json.RawMessage, len(p.PhaseBudgets))
		for k, v := range p.PhaseBudgets {
			j.PhaseBudgets[k] = seconds.Format(v)
		}
	}
	switch {
	case p.EvidenceTTL == Off:
		off := json.RawMessage("-1")
		j.EvidenceTTL = &off
	case p.EvidenceTTL != 0:
		ttl := json.RawMessage(seconds.Format(p.EvidenceTTL))
		j.EvidenceTTL = &ttl
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the seeds' knob names, durations exactly (see
// Policy): a bad duration, an unknown field or a value of the wrong type is
// an error naming the field and the value. An evidence TTL of -1 means Off,
// and so does 0, as older versions wrote it. It does not validate; call
// Validate (Start and Resume do).
func (p *Policy) UnmarshalJSON(b []byte) error {
	var j policyJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	q := Policy{SettleChecks: j.SettleChecks, Mode: j.Mode, RuleModes: j.RuleModes, Channels: j.Channels,
		RecoveryBudget: j.RecoveryBudget, LivenessRules: j.LivenessRules, ContinueWhenOwnerLost: j.Continue,
		SupervisedOnly: j.SupervisedOnly, WorkspaceRoot: j.WorkspaceRoot, WorkspaceIgnore: j.WorkspaceIgnore}
	var err error
	for _, f := range j.durations(&q) {
		if *f.d, err = parseSeconds(f.key, *f.s); err != nil {
			return err
		}
	}
	if ttl := j.EvidenceTTL; ttl != nil {
		if q.EvidenceTTL, err = parseSeconds("agent_idle_activity_evidence_ttl_seconds", *ttl); err != nil {
			return err
		}
		if q.EvidenceTTL == 0 || q.EvidenceTTL == -time.Second {
			q.EvidenceTTL = Off
		}
	}
	if len(j.PhaseBudgets) > 0 {
		q.PhaseBudgets = make(map[string]time.Duration, len(j.PhaseBudgets))
		for k, v := range j.PhaseBudgets {
			if q.PhaseBudgets[k], err = parseSeconds("phase_budgets_seconds["+k+"]", v); err != nil {
				return err
			}
		}
	}
	*p = q
	return nil
}

// parseSeconds reads a JSON number of seconds exactly (see seconds.Parse);
// an error names field and the value.
func parseSeconds(field string, n json.RawMessage) (time.Duration, error) {
	d, why := seconds.Parse(string(n))
	if why != "" {
		return 0, fmt.Errorf("%w: %s = %.64s %s", ErrInvalidPolicy, field, n, why)
	}
	return d, nil
}

// Validate reports the first invalid field of p, wrapped in ErrInvalidPolicy
// and named by its JSON knob. A zero field is valid: it means its default.
func (p Policy) Validate() error {
	var j policyJSON
	for _, f := range j.durations(&p) {
		if *f.d < 0 {
			return fmt.Errorf("%w: %s = %v must not be negative", ErrInvalidPolicy, f.key, f.d.Seconds())
		}
	}
	if p.EvidenceTTL < 0 && p.EvidenceTTL != Off {
		return fmt.Errorf("%w: agent_idle_activity_evidence_ttl_seconds = %v must not be negative (use Off to turn deferral off)", ErrInvalidPolicy, p.EvidenceTTL.Seconds())
	}
	for name, d := range p.PhaseBudgets {
		if err := checkName("phase name", name); err != nil {
			return fmt.Errorf("%w: phase_budgets_seconds: %w", ErrInvalidPolicy, err)
		}
		if d < 0 {
			return fmt.Errorf("%w: phase_budgets_seconds[%s] = %v must not be negative", ErrInvalidPolicy, name, d.Seconds())
		}
	}
	if p.SettleChecks < 0 {
		return fmt.Errorf("%w: settle_checks = %d must not be negative", ErrInvalidPolicy, p.SettleChecks)
	}
	if err := validMode("mode", p.Mode); err != nil {
		return err
	}
	user := map[string]bool{}
	for _, r := range p.LivenessRules {
		if err := checkName("rule name", r); err != nil {
			return fmt.Errorf("%w: liveness_rules: %w", ErrInvalidPolicy, err)
		}
		if _, builtin := ruleByName[r]; builtin || r == "" || user[r] {
			return fmt.Errorf("%w: liveness_rules: %q is empty, built in or declared twice", ErrInvalidPolicy, r)
		}
		user[r] = true
	}
	for rule, m := range p.RuleModes {
		if _, ok := ruleByName[rule]; !ok && !user[rule] {
			return fmt.Errorf("%w: rule_modes: unknown rule %q (want %s, %s, %s, %s or one of liveness_rules)", ErrInvalidPolicy, rule,
				ruleWallClock, ruleSessionCeiling, ruleChildrenWait, ruleIdle)
		}
		if err := validMode("rule_modes["+rule+"]", m); err != nil {
			return err
		}
	}
	if n := len(builtinChannels) + len(p.Channels); n > maxChannels {
		return fmt.Errorf("%w: evidence_channels: %d channels, at most %d", ErrInvalidPolicy, n, maxChannels)
	}
	for i, name := range p.Channels {
		if err := checkName("channel name", name); err != nil {
			return fmt.Errorf("%w: evidence_channels: %w", ErrInvalidPolicy, err)
		}
		if slices.Contains(builtinChannels, name) || slices.Contains(p.Channels[:i], name) {
			return fmt.Errorf("%w: evidence_channels: channel %q declared twice (or is built in)", ErrInvalidPolicy, name)
		}
	}
	return validWorkspace(p.WorkspaceRoot, p.WorkspaceIgnore)
}

func validMode(field string, m Mode) error {
	switch m {
	case "", ModeAct, ModeShadow:
		return nil
	}
	return fmt.Errorf("%w: %s = %q, want %q or %q", ErrInvalidPolicy, field, m, ModeAct, ModeShadow)
}

// same reports whether p and q are the same policy: equal fields, maps and
// slices compared by content (nil and empty alike). Keep it in step with
// Policy's fields (TestPolicySameCoversEveryField checks it).
func (p *Policy) same(q *Policy) bool {
	return p.WallClock == q.WallClock && p.SessionCeiling == q.SessionCeiling &&
		p.ChildrenWaitCeiling == q.ChildrenWaitCeiling && p.IdleWindow == q.IdleWindow &&
		p.EvidenceTTL == q.EvidenceTTL && p.StartupGrace == q.StartupGrace &&
		p.MaxIdleDeferral == q.MaxIdleDeferral && p.SettleChecks == q.SettleChecks &&
		p.SettleInterval == q.SettleInterval && p.Mode == q.Mode &&
		maps.Equal(p.RuleModes, q.RuleModes) && slices.Equal(p.Channels, q.Channels) &&
		maps.Equal(p.PhaseBudgets, q.PhaseBudgets) && p.IterationBudget == q.IterationBudget &&
		p.HandlerGrace == q.HandlerGrace && p.RecoveryBudget == q.RecoveryBudget &&
		p.RecoveryBackoff == q.RecoveryBackoff && slices.Equal(p.LivenessRules, q.LivenessRules) &&
		p.ContinueWhenOwnerLost == q.ContinueWhenOwnerLost && p.SupervisedOnly == q.SupervisedOnly &&
		p.WorkspaceRoot == q.WorkspaceRoot && slices.Equal(p.WorkspaceIgnore, q.WorkspaceIgnore)
}

// clone returns p with its own copies of its maps and slices, so that a
// caller changing them later does not change a session's policy.
func (p Policy) clone() Policy {
	p.RuleModes = maps.Clone(p.RuleModes)
	p.Channels = slices.Clone(p.Channels)
	p.PhaseBudgets = maps.Clone(p.PhaseBudgets)
	p.LivenessRules = slices.Clone(p.LivenessRules)
	p.WorkspaceIgnore = slices.Clone(p.WorkspaceIgnore)
	return p
}

// sessionConfig is what a session needs from its Policy, resolved once and
// shared by the sessions started with the same Policy (see
// Watchdog.config). It is never modified after it is built.
type sessionConfig struct {
	policy          Policy // as given, recorded on start and resume events
	limits          decide.Limits
	grace           time.Duration // Policy.HandlerGrace, resolved
	recoveryBudget  int           // resolved retries
	recoveryBackoff time.Duration // resolved
}

func newSessionConfig(p Policy) *sessionConfig {
	p = p.clone()
	c := &sessionConfig{policy: p, limits: p.limits(), grace: cmp.Or(p.HandlerGrace, defaultHandlerGrace),
		recoveryBudget: p.RecoveryBudget, recoveryBackoff: cmp.Or(p.RecoveryBackoff, defaultRecoveryBackoff)}
	switch {
	case c.recoveryBudget == 0:
		c.recoveryBudget = defaultRecoveryBudget
	case c.recoveryBudget < 0:
		c.recoveryBudget = 0
	}
	return c
}

// limits resolves p (already validated) into the decision's limits.
func (p Policy) limits() decide.Limits {
	l := decide.Limits{
		WallClock:        cmp.Or(p.WallClock, defaultWallClock),
		SessionCeiling:   p.SessionCeiling,
		ChildWaitCeiling: p.ChildrenWaitCeiling,
		IdleWindow:       p.IdleWindow,
		EvidenceTTL:      p.EvidenceTTL,
		StartupGrace:     p.StartupGrace,
		MaxIdleDeferral:  p.MaxIdleDeferral,
		SettleChecks:     cmp.Or(p.SettleChecks, defaultSettleChecks),
		SettleInterval:   cmp.Or(p.SettleInterval, defaultSettleInterval),
	}
	switch l.EvidenceTTL {
	case 0:
		l.EvidenceTTL = defaultEvidenceTTL
	case Off:
		l.EvidenceTTL = 0
	}
	for r := range decide.NumRules {
		if p.modeOf(ruleNames[r]) == ModeShadow {
			l.Shadow = l.Shadow.With(r)
		}
	}
	return l
}

// modeOf is the mode of rule (built in or one of LivenessRules):
// RuleModes[rule], else Mode, else ModeAct.
func (p Policy) modeOf(rule string) Mode {
	if m := p.RuleModes[rule]; m != "" {
		return m
	}
	if p.Mode != "" {
		return p.Mode
	}
	return ModeAct
}
