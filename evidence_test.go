package watchdog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// idlePolicy: 10 s idle window, 5 s evidence TTL, act at the first stale check.
func idlePolicy() watchdog.Policy {
	return watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: 5 * time.Second, SettleChecks: 1}
}

func ofKind(evs []watchdog.Event, kind string) []watchdog.Event {
	var out []watchdog.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func entry(t *testing.T, e watchdog.Event, ch string) watchdog.EvidenceEntry {
	t.Helper()
	for _, x := range e.EvidenceSummary {
		if x.Channel == ch {
			return x
		}
	}
	t.Fatalf("event %s has no evidence for %q: %+v", e.Kind, ch, e.EvidenceSummary)
	return watchdog.EvidenceEntry{}
}

// Stdout silent past the idle window while workspace changes keep coming
// gives CONTINUE verdicts with evidence and no kill; once the workspace is
// quiet past the TTL the HARD_STOP carries the per-channel summary.
func TestWorkspaceEvidenceDefersTheIdleFireUntilItGoesStale(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "agent", t0, idlePolicy())
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout) // the agent's last line of output, at t0

	for i := 0; i < 4; i++ { // file work every 4 s, no output
		advance(t, mock, 4*time.Second, w)
		s.Touch(watchdog.ChannelWorkspace)
	}
	require.NoError(t, s.Context().Err(), "a session doing file work must not be killed")
	evs := load(t, store, "agent")
	conts := ofKind(evs, watchdog.KindVerdict)
	require.NotEmpty(t, conts)
	for _, c := range conts {
		assert.Equal(t, "CONTINUE", jsonField(t, c, "verdict"))
		assert.Equal(t, "workspace", c.ActiveChannel)
		assert.Equal(t, "idle", c.Rule)
		require.Len(t, c.EvidenceSummary, 4)
		assert.Nil(t, entry(t, c, "mcp_tool").LastAt, "a channel without evidence has no last_at")
	}
	first := conts[0]
	assert.Equal(t, t0.Add(10*time.Second+1), first.OccurredAt, "the first look is just past the idle window")
	assert.Equal(t, t0, *entry(t, first, "stdout").LastAt)
	assert.Equal(t, t0.Add(8*time.Second), *entry(t, first, "workspace").LastAt)
	assert.InDelta(t, 2.000000001, first.OccurredAt.Sub(*entry(t, first, "workspace").LastAt).Seconds(), 1e-9)
	ages := jsonField(t, first, "evidence_summary").([]any)
	assert.InDelta(t, 2.000000001, ages[3].(map[string]any)["age_seconds"], 1e-9, "the JSON carries each channel's age")
	assert.Nil(t, ages[2].(map[string]any)["age_seconds"], "null for a channel without evidence")
	assert.Equal(t, uint64(2), entry(t, first, "workspace").Counter)

	advance(t, mock, 6*time.Second, w) // the workspace goes quiet
	cause := context.Cause(s.Context())
	require.ErrorIs(t, cause, watchdog.ErrIdleExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.True(t, v.Recoverable)
	assert.Equal(t, "watchdog_idle_exceeded", v.StopReasonCode())

	evs = load(t, store, "agent")
	dec := ofKind(evs, watchdog.KindDecision)
	require.Len(t, dec, 1)
	d := dec[0]
	assert.Equal(t, "HARD_STOP", jsonField(t, d, "verdict"))
	assert.Equal(t, "none", d.ActiveChannel)
	assert.Equal(t, t0.Add(21*time.Second+1), d.OccurredAt, "fires when the last file change is older than the TTL")
	assert.InDelta(t, 5.000000001, d.OccurredAt.Sub(*entry(t, d, "workspace").LastAt).Seconds(), 1e-9)
	assert.InDelta(t, 21.000000001, d.OccurredAt.Sub(*entry(t, d, "stdout").LastAt).Seconds(), 1e-9)
	assert.Equal(t, uint64(4), entry(t, d, "workspace").Counter)
	c := ofKind(evs, watchdog.KindCancel)
	require.Len(t, c, 1)
	assert.Equal(t, d.ID, c[0].DecidedByDecisionID)
	assert.Equal(t, "watchdog_idle_exceeded", jsonField(t, c[0], "stop_reason_code"))
	require.NotNil(t, c[0].Recoverable)
	assert.True(t, *c[0].Recoverable)
	assert.Equal(t, watchdog.KindCancel, evs[len(evs)-1].Kind)

	// The summary is plain JSON a post-mortem reader can use.
	b, err := json.Marshal(d)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"evidence_summary":[{"channel":"stdout","last_at":"2026-05-23T09:00:00Z","age_seconds":21.000000001,"counter":1}`)
}

// With the evidence TTL off only stdout counts (the seeds' behaviour): fresh
// tool calls do not defer the idle rule, which fires at the idle window. In
// JSON, Off is written as -1.
func TestEvidenceTTLOffFiresAtTheIdleWindowDespiteFreshToolCalls(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.EvidenceTTL = watchdog.Off
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	advance(t, mock, 9*time.Second, w)
	s.Touch(watchdog.ChannelMCPTool)
	advance(t, mock, time.Second, w)
	s.Touch(watchdog.ChannelMCPTool)
	require.NoError(t, s.Context().Err())
	advance(t, mock, time.Nanosecond, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	assert.Empty(t, ofKind(load(t, store, "s"), watchdog.KindVerdict), "nothing was deferred")

	// In JSON, Off is -1 (0, as older versions wrote it, is read as Off too)
	// and an absent knob means the default.
	var q watchdog.Policy
	for _, off := range []string{"-1", "0"} {
		require.NoError(t, json.Unmarshal([]byte(`{"agent_idle_activity_evidence_ttl_seconds":`+off+`}`), &q))
		assert.Equal(t, watchdog.Off, q.EvidenceTTL)
	}
	b, err := json.Marshal(q)
	require.NoError(t, err)
	assert.JSONEq(t, `{"agent_idle_activity_evidence_ttl_seconds":-1}`, string(b))
	require.NoError(t, json.Unmarshal([]byte(`{}`), &q))
	assert.Equal(t, time.Duration(0), q.EvidenceTTL)
}

func busy(s *watchdog.Session) {
	for _, ch := range []watchdog.Channel{watchdog.ChannelStdout, watchdog.ChannelMCPTool, watchdog.ChannelSubagent, watchdog.ChannelWorkspace} {
		s.Touch(ch)
	}
}

// No evidence extends a ceiling: a session busy on every channel still ends
// at its session ceiling, with a verdict that is neither recoverable nor
// resumable.
func TestFreshEvidenceNeverExtendsTheSessionCeilingAndAResumePastItEndsAtOnce(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.SessionCeiling = time.Minute
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	for i := 0; i < 12; i++ {
		busy(s)
		advance(t, mock, 5*time.Second, w)
	}
	busy(s)
	require.NoError(t, s.Context().Err())
	advance(t, mock, time.Nanosecond, w)
	cause := context.Cause(s.Context())
	require.ErrorIs(t, cause, watchdog.ErrSessionCeilingExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.False(t, v.Recoverable)
	assert.False(t, v.Resumable())
	c := ofKind(load(t, store, "s"), watchdog.KindCancel)
	require.Len(t, c, 1)
	assert.Equal(t, "watchdog_session_ceiling_exceeded", jsonField(t, c[0], "stop_reason_code"))
	assert.Equal(t, t0.Add(time.Minute+1), c[0].FiredAt)

	// Resume accepts the session, but its ceiling counts from the
	// session's start: the new window is cancelled at once.
	s2, err := w.Resume(context.Background(), "s", p)
	require.NoError(t, err)
	assert.Equal(t, 2, s2.Window())
	require.NoError(t, w.Check(context.Background()))
	require.ErrorIs(t, context.Cause(s2.Context()), watchdog.ErrSessionCeilingExceeded)
	assert.Len(t, ofKind(load(t, store, "s"), watchdog.KindCancel), 2)
}

func TestChildWaitCeilingCountsNestedAndConcurrentWaitsOnce(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.ChildrenWaitCeiling = 20 * time.Second
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)

	busy(s)
	outer := s.BeginChildWait() // t=0
	advance(t, mock, 2*time.Second, w)
	inner := s.BeginChildWait() // nested, t=2
	advance(t, mock, 3*time.Second, w)
	inner() // t=5
	inner() // a second call is a no-op
	busy(s)
	advance(t, mock, 5*time.Second, w)
	outer() // t=10: 10 s waited, not 13
	busy(s)
	advance(t, mock, 4*time.Second, w) // t=14, no wait open
	busy(s)
	a, b := s.BeginChildWait(), s.BeginChildWait() // concurrent, t=14
	advance(t, mock, 5*time.Second, w)
	busy(s)
	a() // t=19, b still open
	advance(t, mock, 5*time.Second-1, w)
	busy(s)
	require.NoError(t, s.Context().Err(), "19.999999999 s of waiting is under the ceiling")
	advance(t, mock, 2, w)
	cause := context.Cause(s.Context())
	require.ErrorIs(t, cause, watchdog.ErrChildrenWaitExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, cause, &v)
	assert.Equal(t, 20*time.Second+1, v.Elapsed)
	assert.Equal(t, t0.Add(24*time.Second+1), v.FiredAt)
	b()
	c := ofKind(load(t, store, "s"), watchdog.KindCancel)
	require.Len(t, c, 1)
	assert.Equal(t, "watchdog_children_wait_exceeded", jsonField(t, c[0], "stop_reason_code"))
	assert.InDelta(t, 20.000000001, c[0].ChildrenWaitSeconds, 1e-9)
}

// The settle window: the idle rule acts only after SettleChecks consecutive
// stale looks (stale, stale, fresh, stale, stale does not act), and once.
func TestSettleWindowActsOnlyOnConsecutiveStaleChecks(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := watchdog.Policy{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: watchdog.Off,
		SettleChecks: 3, SettleInterval: 5 * time.Second}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)

	advance(t, mock, 10*time.Second+1, w) // stale 1
	advance(t, mock, 5*time.Second, w)    // stale 2
	s.Touch(watchdog.ChannelStdout)       // fresh
	advance(t, mock, 5*time.Second, w)    // the settle look sees fresh output: reset
	advance(t, mock, 10*time.Second, w)   // stale 1
	advance(t, mock, 5*time.Second, w)    // stale 2
	require.NoError(t, s.Context().Err(), "stale, stale, fresh, stale, stale does not act")
	evs := load(t, store, "s")
	assert.Empty(t, ofKind(evs, watchdog.KindDecision))
	var counts []int
	for _, e := range ofKind(evs, watchdog.KindVerdict) {
		counts = append(counts, e.SettleCount)
		assert.Equal(t, 3, e.SettleChecks)
		assert.Equal(t, "none", e.ActiveChannel)
	}
	assert.Equal(t, []int{1, 2, 1, 2}, counts)

	advance(t, mock, 5*time.Second, w) // stale 3: act
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded)
	advance(t, mock, time.Minute, w)
	evs = load(t, store, "s")
	assert.Len(t, ofKind(evs, watchdog.KindDecision), 1, "acts once")
	assert.Len(t, ofKind(evs, watchdog.KindCancel), 1)
}

func TestStartupGraceDelaysTheIdleRuleUntilFirstOutput(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	p := idlePolicy()
	p.StartupGrace = 30 * time.Second

	quiet, err := w.Start(context.Background(), "quiet", t0, p)
	require.NoError(t, err)
	early, err := w.Start(context.Background(), "early", t0, p)
	require.NoError(t, err)
	advance(t, mock, 5*time.Second, w)
	early.Touch(watchdog.ChannelStdout) // first output arms the rule at once

	advance(t, mock, 10*time.Second+1, w) // t=15s+1ns
	require.ErrorIs(t, context.Cause(early.Context()), watchdog.ErrIdleExceeded)
	var v *watchdog.VerdictError
	require.ErrorAs(t, context.Cause(early.Context()), &v)
	assert.Equal(t, t0.Add(15*time.Second+1), v.FiredAt)

	advance(t, mock, 25*time.Second-1, w) // t=40
	require.NoError(t, quiet.Context().Err(), "grace 30 s + idle window 10 s")
	advance(t, mock, 1, w)
	require.ErrorIs(t, context.Cause(quiet.Context()), watchdog.ErrIdleExceeded)
}

// The startup grace counts from the window's start: a supervisor restarted
// in the middle of it resumes the window with what is left of the grace,
// not a fresh one.
func TestResumeDoesNotGrantTheStartupGraceAgain(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	p := idlePolicy()
	p.StartupGrace = 30 * time.Second
	w1 := watchdog.New(watchdog.WithClock(mock), watchdog.WithStore(store))
	_, err := w1.Start(context.Background(), "quiet", t0, p)
	require.NoError(t, err)
	advance(t, mock, 20*time.Second, w1)
	require.NoError(t, w1.Close(context.Background())) // the supervisor restarts

	w2 := newWatchdog(t, mock, store)
	s, err := w2.Resume(context.Background(), "quiet", p)
	require.NoError(t, err)
	advance(t, mock, 20*time.Second, w2) // t=40s
	require.NoError(t, s.Context().Err(), "grace until 30 s + idle window 10 s")
	advance(t, mock, 1, w2)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded, "not at 60 s: the grace was not granted again")
}

func TestIdleDeferralCapIsFatalEvenWithEvidence(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	p := idlePolicy()
	p.MaxIdleDeferral = 20 * time.Second
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	s.Touch(watchdog.ChannelStdout)
	for i := 0; i < 7; i++ {
		advance(t, mock, 4*time.Second, w)
		s.Touch(watchdog.ChannelWorkspace)
	}
	require.NoError(t, s.Context().Err()) // t=28: deferred since 10 s
	advance(t, mock, 4*time.Second, w)
	var v *watchdog.VerdictError
	require.ErrorAs(t, context.Cause(s.Context()), &v)
	assert.Equal(t, t0.Add(30*time.Second+1), v.FiredAt, "stale since 10 s, deferral capped at 20 s")
}

// Work, not existence: a heartbeat counts only when its progress advances.
func TestProgressHeartbeatsCountOnlyWhenTheValueAdvances(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	s, err := w.Start(context.Background(), "s", t0, idlePolicy())
	require.NoError(t, err)
	assert.False(t, s.Progress(watchdog.ChannelSubagent, 0))
	assert.True(t, s.Progress(watchdog.ChannelSubagent, 5))
	for i := 0; i < 3; i++ { // a wedged worker's ticker keeps pinging step 5
		advance(t, mock, 4*time.Second, w)
		assert.False(t, s.Progress(watchdog.ChannelSubagent, 5))
		assert.False(t, s.Progress(watchdog.ChannelSubagent, 4))
	}
	advance(t, mock, 4*time.Second, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrIdleExceeded, "pings without progress are no evidence")
}

func TestWriterRecordsStdoutEvidencePerWrite(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, idlePolicy())
	require.NoError(t, err)
	var buf bytes.Buffer
	out := s.Writer(watchdog.ChannelStdout, &buf)
	for i := 0; i < 5; i++ {
		advance(t, mock, 8*time.Second, w)
		_, err := out.Write([]byte("line\n"))
		require.NoError(t, err)
	}
	require.NoError(t, s.Context().Err(), "40 s of steady output is not idle")
	assert.Equal(t, 25, buf.Len())
	n, err := s.Writer(watchdog.ChannelStdout, nil).Write([]byte("discarded"))
	require.NoError(t, err)
	assert.Equal(t, 9, n)
}

func TestNamedChannelsDeferLikeBuiltInOnes(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store)
	p := idlePolicy()
	p.Channels = []string{"browser"}
	s, err := w.Start(context.Background(), "s", t0, p)
	require.NoError(t, err)
	browser, err := s.Channel("browser")
	require.NoError(t, err)
	_, err = s.Channel("nope")
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	advance(t, mock, 9*time.Second, w)
	s.Touch(browser)
	s.Touch(watchdog.Channel(99)) // out of range: ignored
	advance(t, mock, 2*time.Second, w)
	require.NoError(t, s.Context().Err())
	v := ofKind(load(t, store, "s"), watchdog.KindVerdict)
	require.Len(t, v, 1)
	assert.Equal(t, "browser", v[0].ActiveChannel)
	assert.Len(t, v[0].EvidenceSummary, 5)
}

func TestPolicyValidationNamesTheKnob(t *testing.T) {
	for _, tt := range []struct {
		p    watchdog.Policy
		want string
	}{
		{watchdog.Policy{IdleWindow: -1}, "no_output_deadline_seconds"},
		{watchdog.Policy{EvidenceTTL: -2}, "agent_idle_activity_evidence_ttl_seconds"},
		{watchdog.Policy{SettleChecks: -1}, "settle_checks"},
		{watchdog.Policy{SessionCeiling: -1}, "session_ceiling_seconds"},
		{watchdog.Policy{Mode: "kill"}, "mode"},
		{watchdog.Policy{RuleModes: map[string]watchdog.Mode{"typo": watchdog.ModeAct}}, `unknown rule "typo"`},
		{watchdog.Policy{Channels: []string{"stdout"}}, `"stdout" declared twice`},
		{watchdog.Policy{Channels: []string{""}}, "empty channel name"},
	} {
		err := tt.p.Validate()
		require.ErrorIs(t, err, watchdog.ErrInvalidPolicy, tt.want)
		assert.Contains(t, err.Error(), tt.want)
	}
	require.NoError(t, watchdog.Policy{EvidenceTTL: watchdog.Off}.Validate())

	in := `{"session_wall_clock_seconds":3600,"session_ceiling_seconds":7200,"children_wait_ceiling_seconds":600,"no_output_deadline_seconds":300,"agent_idle_activity_evidence_ttl_seconds":30,"startup_grace_seconds":60,"max_idle_deferral_seconds":900,"settle_checks":3,"settle_interval_seconds":10,"mode":"act","rule_modes":{"idle":"shadow"},"evidence_channels":["browser"]}`
	var p watchdog.Policy
	require.NoError(t, json.Unmarshal([]byte(in), &p))
	require.NoError(t, p.Validate())
	assert.Equal(t, 5*time.Minute, p.IdleWindow)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(out))
}

func TestWatchWorkspaceRejectsBadInput(t *testing.T) {
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	require.ErrorIs(t, s.WatchWorkspace(""), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, s.WatchWorkspace(t.TempDir()+"/missing"), watchdog.ErrInvalidArgument)
	require.ErrorIs(t, s.WatchWorkspace(t.TempDir(), "[a-"), watchdog.ErrInvalidArgument)
	require.NoError(t, s.Stop())
	require.ErrorIs(t, s.WatchWorkspace(t.TempDir()), watchdog.ErrSessionStopped)
}
