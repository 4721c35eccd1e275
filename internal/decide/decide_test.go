package decide

import (
	"testing"
	"time"
)

var start = time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return start.Add(d) }

func ns(d time.Duration) int64 { return start.Add(d).UnixNano() }

// chans builds channels: stdout, mcp_tool, subagent, workspace; a negative
// offset means "never".
func chans(offsets ...time.Duration) []Channel {
	out := make([]Channel, 4)
	for i := range out {
		out[i] = Channel{Last: Never}
		if i < len(offsets) && offsets[i] >= 0 {
			out[i] = Channel{Last: ns(offsets[i]), Count: 1}
		}
	}
	return out
}

const never = -1

func snap(ch []Channel) Snapshot {
	return Snapshot{SessionStartedAt: start, WindowStartedAt: start, Channels: ch}
}

func TestWallClockOverFixedInstants(t *testing.T) {
	l := Limits{WallClock: 10 * time.Second, SettleChecks: 1, SettleInterval: time.Second}
	tests := []struct {
		name     string
		now      time.Time
		action   Action
		wantNext time.Time
	}{
		{"at the start", at(0), Continue, at(10*time.Second + 1)},
		{"exactly at the budget is not an overrun", at(10 * time.Second), Continue, at(10*time.Second + 1)},
		{"one nanosecond past fires", at(10*time.Second + 1), Act, time.Time{}},
		{"clock before the start (skew) continues", at(-time.Minute), Continue, at(10*time.Second + 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(l, snap(nil), tt.now)
			if v.Action != tt.action || !v.Next.Equal(tt.wantNext) {
				t.Fatalf("Decide = %+v, want action %v next %v", v, tt.action, tt.wantNext)
			}
			if tt.action == Act && (v.Rule != RuleWallClock || v.Elapsed != tt.now.Sub(start) || v.Budget != l.WallClock || !v.Record) {
				t.Fatalf("act verdict %+v", v)
			}
		})
	}
}

func graced(l Limits) Limits { l.StartupGrace = time.Minute; return l }

func TestIdleRuleOverFixedInstants(t *testing.T) {
	base := Limits{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: 30 * time.Second,
		SettleChecks: 1, SettleInterval: 5 * time.Second}
	tests := []struct {
		name     string
		l        func(Limits) Limits
		ch       []Channel
		now      time.Time
		action   Action
		deferred bool
		active   int
		next     time.Time
	}{
		{"stdout fresh continues until its idle deadline", nil, chans(5 * time.Second), at(12 * time.Second),
			Continue, false, -1, at(15*time.Second + 1)},
		{"no stdout yet: idle measured from the window start", nil, chans(never), at(10 * time.Second),
			Continue, false, -1, at(10*time.Second + 1)},
		{"startup grace delays arming; a look one window on catches a first line", graced,
			chans(never), at(30 * time.Second), Continue, false, -1, at(40*time.Second + 1)},
		{"past the grace without output: idle from the grace's end", graced,
			chans(never), at(65 * time.Second), Continue, false, -1, at(70*time.Second + 1)},
		{"first output arms before the grace ends", graced,
			chans(2 * time.Second), at(13 * time.Second), Act, false, -1, time.Time{}},
		{"stdout silent, workspace fresh: deferred until the workspace evidence expires", nil,
			chans(0, never, never, 25*time.Second), at(30 * time.Second), Continue, true, 3, at(55*time.Second + 1)},
		{"freshest of several channels justifies waiting", nil,
			chans(0, 20*time.Second, 28*time.Second, 25*time.Second), at(30 * time.Second), Continue, true, 2, at(58*time.Second + 1)},
		{"evidence exactly TTL old still defers", nil, chans(0, 0), at(30 * time.Second), Continue, true, 1, at(30*time.Second + 1)},
		{"evidence older than the TTL: hard stop", nil, chans(0, 0), at(30*time.Second + 1), Act, false, -1, time.Time{}},
		{"TTL 0: stdout only, fresh tool calls do not defer", func(l Limits) Limits { l.EvidenceTTL = 0; return l },
			chans(0, 10*time.Second), at(10*time.Second + 1), Act, false, -1, time.Time{}},
		{"deferral cap reached: hard stop despite evidence", func(l Limits) Limits { l.MaxIdleDeferral = time.Minute; return l },
			chans(0, 0, 0, 70*time.Second+1), at(70*time.Second + 2), Act, false, -1, time.Time{}},
		{"deferral under the cap schedules the cap", func(l Limits) Limits { l.MaxIdleDeferral = 20 * time.Second; return l },
			chans(0, 0, 0, 25*time.Second), at(26 * time.Second), Continue, true, 3, at(30*time.Second + 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base
			if tt.l != nil {
				l = tt.l(l)
			}
			sn := snap(tt.ch)
			if l.StartupGrace > 0 {
				sn.GraceUntil = start.Add(l.StartupGrace)
			}
			v := Decide(l, sn, tt.now)
			if v.Action != tt.action || v.Deferred != tt.deferred || v.ActiveChannel != tt.active || !v.Next.Equal(tt.next) {
				t.Fatalf("Decide = %+v\nwant action %v deferred %v active %d next %v", v, tt.action, tt.deferred, tt.active, tt.next)
			}
			if tt.action == Act && (v.Rule != RuleIdle || !v.Rule.Recoverable()) {
				t.Fatalf("idle act verdict %+v", v)
			}
			if tt.deferred && !v.Record {
				t.Fatal("a deferred CONTINUE must be recorded")
			}
		})
	}
}

func TestCeilingsComeBeforeDeferral(t *testing.T) {
	l := Limits{WallClock: time.Hour, IdleWindow: 10 * time.Second, EvidenceTTL: time.Hour,
		SessionCeiling: time.Minute, ChildWaitCeiling: 30 * time.Second, SettleChecks: 3, SettleInterval: time.Second}
	busy := chans(59*time.Second, 59*time.Second, 59*time.Second, 59*time.Second)

	s := snap(busy)
	s.SessionStartedAt = start.Add(-time.Hour) // resumed long after the session began
	v := Decide(l, s, at(time.Second))
	if v.Action != Act || v.Rule != RuleSessionCeiling || v.Rule.Recoverable() {
		t.Fatalf("session ceiling: %+v", v)
	}

	s = snap(busy)
	s.ChildWait = 20 * time.Second
	s.ChildWaitOpenSince = at(40 * time.Second)
	if v := Decide(l, s, at(50*time.Second)); v.Action != Continue || !v.Next.Equal(at(50*time.Second+1)) {
		t.Fatalf("children wait under the ceiling: %+v", v)
	}
	if v := Decide(l, s, at(50*time.Second+1)); v.Action != Act || v.Rule != RuleChildrenWait || v.Elapsed != 30*time.Second+1 {
		t.Fatalf("children wait over the ceiling: %+v", v)
	}
}

// The settle window: stale, stale, fresh, stale, stale does not act; three
// consecutive stale observations do, once.
func TestSettleWindowNeedsConsecutiveStaleChecks(t *testing.T) {
	l := Limits{WallClock: time.Hour, IdleWindow: 10 * time.Second, SettleChecks: 3, SettleInterval: 5 * time.Second}
	s := snap(chans(0))
	now := at(10*time.Second + 1)
	step := func(want Action) Verdict {
		t.Helper()
		v := Decide(l, s, now)
		if v.Action != want {
			t.Fatalf("at %v: %+v, want %v", now.Sub(start), v, want)
		}
		s.State = v.State
		return v
	}
	v := step(Continue) // stale 1
	if v.State.StaleChecks != 1 || !v.Record || !v.Next.Equal(now.Add(5*time.Second)) {
		t.Fatalf("first stale: %+v", v)
	}
	now = now.Add(2 * time.Second)
	if v := step(Continue); v.State.StaleChecks != 1 {
		t.Fatalf("an early look must not count: %+v", v)
	}
	now = at(15*time.Second + 1)
	step(Continue) // stale 2
	s.Channels[0].Last = ns(16 * time.Second)
	now = at(20*time.Second + 1)
	if v := step(Continue); v.State.StaleChecks != 0 || v.Record {
		t.Fatalf("fresh output resets the count: %+v", v)
	}
	now = at(26*time.Second + 1)
	step(Continue) // stale 1
	now = now.Add(5 * time.Second)
	step(Continue) // stale 2
	now = now.Add(5 * time.Second)
	if v := step(Act); v.Rule != RuleIdle {
		t.Fatalf("third consecutive stale check acts: %+v", v)
	}
}

func TestShadowRulesAdviseOnce(t *testing.T) {
	l := Limits{WallClock: 10 * time.Second, IdleWindow: 5 * time.Second, SettleChecks: 1, SettleInterval: time.Second,
		Shadow: RuleSet(0).With(RuleWallClock).With(RuleIdle)}
	s := snap(chans(0))
	v := Decide(l, s, at(6*time.Second))
	if v.Action != Advise || v.Rule != RuleIdle {
		t.Fatalf("idle in shadow: %+v", v)
	}
	s.State = v.State
	s.State.Advised = s.State.Advised.With(RuleIdle)
	if v := Decide(l, s, at(7*time.Second)); v.Action != Continue || v.Record {
		t.Fatalf("idle advised once per episode: %+v", v)
	}
	v = Decide(l, s, at(11*time.Second))
	if v.Action != Advise || v.Rule != RuleWallClock {
		t.Fatalf("wall clock in shadow: %+v", v)
	}
	s.State.Advised = s.State.Advised.With(RuleWallClock)
	if v := Decide(l, s, at(time.Hour)); v.Action != Continue {
		t.Fatalf("advised rules stay quiet: %+v", v)
	}
	// Fresh output ends the idle episode; the next one is advised again.
	s.Channels[0].Last = ns(time.Hour)
	v = Decide(l, s, at(time.Hour+time.Second))
	if v.State.Advised.Has(RuleIdle) {
		t.Fatalf("fresh output must clear the idle advice: %+v", v)
	}
}

func TestMissingDataIsNeverActedOn(t *testing.T) {
	v := Decide(Limits{WallClock: time.Second}, Snapshot{}, at(time.Hour))
	if v.Action != Continue || v.Record {
		t.Fatalf("%+v", v)
	}
}

func TestDecideIsPure(t *testing.T) {
	l := Limits{WallClock: time.Second, IdleWindow: time.Second, EvidenceTTL: time.Second, SettleChecks: 2, SettleInterval: time.Second}
	s := snap(chans(0, 500*time.Millisecond))
	a, b := Decide(l, s, at(1500*time.Millisecond)), Decide(l, s, at(1500*time.Millisecond))
	if a != b {
		t.Fatalf("same inputs, different verdicts: %+v vs %+v", a, b)
	}
}

func TestLivenessSettlesThenActsOrAdvisesAndAFreshObservationResets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	type obs struct {
		at     int
		stale  bool
		action Action
		record bool
		stale2 int // the count after the observation
	}
	for _, tc := range []struct {
		name   string
		shadow bool
		busy   bool
		obs    []obs
	}{
		{"three stale checks act", false, false, []obs{{0, true, Continue, true, 1}, {10, true, Continue, true, 2}, {20, true, Act, false, 0}}},
		{"an early stale observation is not counted", false, false, []obs{{0, true, Continue, true, 1}, {5, true, Continue, false, 1}, {10, true, Continue, true, 2}}},
		{"a fresh observation resets the count", false, false, []obs{{0, true, Continue, true, 1}, {10, false, Continue, false, 0}, {20, true, Continue, true, 1}}},
		{"shadow advises once per episode", true, false, []obs{{0, true, Continue, true, 1}, {10, true, Continue, true, 2}, {20, true, Advise, false, 3}, {30, true, Continue, false, 3}, {40, false, Continue, false, 0}}},
		{"nothing is counted while an action is pending", false, true, []obs{{0, true, Continue, false, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st LivenessState
			for i, o := range tc.obs {
				v := Liveness(st, o.stale, sec(o.at), 3, 10*time.Second, tc.shadow, tc.busy)
				if v.Action != o.action || v.Record != o.record || v.State.Stale != o.stale2 {
					t.Fatalf("observation %d: got action %v record %v count %d, want %v %v %d", i, v.Action, v.Record, v.State.Stale, o.action, o.record, o.stale2)
				}
				st = v.State
			}
		})
	}
}

func TestRetryDoublesTheBackoffUntilTheBudgetIsSpent(t *testing.T) {
	for _, tc := range []struct {
		retries, budget int
		retry           bool
		wait            time.Duration
	}{
		{0, 2, true, time.Second},
		{1, 2, true, 2 * time.Second},
		{2, 2, false, 0},
		{0, 0, false, 0},
		{40, 100, true, time.Second << 20}, // the doubling stops at 2^20
	} {
		retry, wait := Retry(tc.retries, tc.budget, time.Second)
		if retry != tc.retry || wait != tc.wait {
			t.Errorf("Retry(%d, %d): %v %v, want %v %v", tc.retries, tc.budget, retry, wait, tc.retry, tc.wait)
		}
	}
}

func TestResumeContinuesAnOpenWindowAndOpensTheNextAfterATerminal(t *testing.T) {
	for _, tc := range []struct {
		last   int
		ended  bool
		window int
		fresh  bool
	}{{0, false, 1, true}, {1, false, 1, false}, {1, true, 2, true}, {7, false, 7, false}} {
		if w, f := ResumeWindow(tc.last, tc.ended); w != tc.window || f != tc.fresh {
			t.Errorf("ResumeWindow(%d, %v) = %d %v, want %d %v", tc.last, tc.ended, w, f, tc.window, tc.fresh)
		}
	}
}

func TestADeadlineExpiresAtExactlyItsStartPlusBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if Expired(t0, time.Second, t0.Add(time.Second-1)) || !Expired(t0, time.Second, t0.Add(time.Second)) {
		t.Fatal("a deadline expires at start + budget, not before")
	}
}
