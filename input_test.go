package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sessionwatchdog/watchdog"
)

// Ids no store can keep are refused at Start and Resume, with an error
// naming the value: invalid UTF-8, a NUL byte, more than 1,024 bytes. The
// longest id accepted is recorded.
func TestStartAndResumeRefuseAnIDNoStoreCanKeep(t *testing.T) {
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	for name, id := range map[string]string{
		"invalid UTF-8": "agent-\xff",
		"NUL":           "agent\x00",
		"too long":      strings.Repeat("a", 1025),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := w.Start(context.Background(), id, t0, watchdog.Policy{})
			require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
			assert.ErrorContains(t, err, "session id")
			_, err = w.Resume(context.Background(), id, watchdog.Policy{})
			require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
		})
	}
	long := strings.Repeat("é", 512) // 1,024 bytes
	_, err := w.Start(context.Background(), long, t0, watchdog.Policy{})
	require.NoError(t, err)
	require.NoError(t, w.Check(context.Background()))
	assert.Equal(t, []string{watchdog.KindStart}, kinds(load(t, w.Store().(*watchdog.MemoryStore), long)))
}

// Names the Watchdog records are checked like ids: channel names (two that
// differ only in invalid bytes would collapse to one in JSON), rule and
// phase names in the policy, handler and phase names at the call.
func TestNamesNoStoreCanKeepAreRefused(t *testing.T) {
	for name, p := range map[string]watchdog.Policy{
		"channels differing in invalid bytes": {Channels: []string{"build\xff", "build\xfe"}},
		"channel with NUL":                    {Channels: []string{"a\x00b"}},
		"long liveness rule":                  {LivenessRules: []string{strings.Repeat("r", 1025)}},
		"phase name not UTF-8":                {PhaseBudgets: map[string]time.Duration{"\xc3": time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, p.Validate(), watchdog.ErrInvalidPolicy)
		})
	}
	w := newWatchdog(t, newMock(), watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{})
	require.NoError(t, err)
	err = watchdog.Call(s.Context(), "tool\xff", time.Second, func(context.Context) error { return nil })
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.ErrorContains(t, err, "handler name")
	_, _, err = watchdog.RunPhase(s, "", 0, func(context.Context, int) (int, error) { return 0, nil })
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
}

// Free text from user code (an action's error, a step's name) is made
// storable instead of refused: invalid bytes become U+FFFD, so the event is
// recorded, passes Validate and reads back the same.
func TestFreeTextFromUserCodeIsRecordedAsValidText(t *testing.T) {
	mock := newMock()
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, mock, store, watchdog.WithAction(func(context.Context, *watchdog.Session, *watchdog.VerdictError) error {
		return errors.New("denied\x00\xff")
	}))
	s, err := w.Start(context.Background(), "s", t0, watchdog.Policy{WallClock: time.Second})
	require.NoError(t, err)
	advance(t, mock, time.Second+1, w)
	f := ofKind(load(t, store, "s"), watchdog.KindActionFailed)
	require.Len(t, f, 1)
	assert.Equal(t, "denied\x00\uFFFD", f[0].Error)
	require.NoError(t, s.Stop())
}

// Event.Validate refuses what a store could not keep or read back the same:
// ids beyond the limit, text that is not UTF-8 in any field, numbers JSON
// cannot hold, an Extra key colliding with a field, an invalid policy.
func TestEventValidateRefusesWhatAStoreCouldNotKeep(t *testing.T) {
	base := watchdog.Event{ID: "e1", AggregateID: "s", Kind: watchdog.KindStart, Window: 1}
	require.NoError(t, base.Validate())
	for name, mut := range map[string]func(e *watchdog.Event){
		"long id":           func(e *watchdog.Event) { e.AggregateID = strings.Repeat("a", 1025) },
		"reason not UTF-8":  func(e *watchdog.Event) { e.Reason = "\xff" },
		"error not UTF-8":   func(e *watchdog.Event) { e.Error = "a\xc3" },
		"kind with NUL":     func(e *watchdog.Event) { e.Kind = "k\x00" },
		"channel not UTF-8": func(e *watchdog.Event) { e.EvidenceSummary = []watchdog.EvidenceEntry{{Channel: "\xff"}} },
		"NaN":               func(e *watchdog.Event) { e.ElapsedSeconds = math.NaN() },
		"infinity":          func(e *watchdog.Event) { e.MeasureSeconds = math.Inf(1) },
		"extra EVENT_ID":    func(e *watchdog.Event) { e.Extra = map[string]json.RawMessage{"EVENT_ID": json.RawMessage(`"x"`)} },
		"extra event_id":    func(e *watchdog.Event) { e.Extra = map[string]json.RawMessage{"event_id": json.RawMessage(`"x"`)} },
		"extra not UTF-8":   func(e *watchdog.Event) { e.Extra = map[string]json.RawMessage{"note": json.RawMessage("\"bad \xff\"")} },
		"invalid policy":    func(e *watchdog.Event) { e.Policy = &watchdog.Policy{SettleChecks: -1} },
	} {
		t.Run(name, func(t *testing.T) {
			e := base
			mut(&e)
			require.ErrorIs(t, e.Validate(), watchdog.ErrInvalidEvent)
		})
	}
	e := base
	e.Error, e.Extra = "a\x00b", map[string]json.RawMessage{"note": json.RawMessage(`"a\u0000"`)}
	require.NoError(t, e.Validate(), "JSON carries a NUL in text; only ids are text columns")
}

// An Extra key that differs from a field only in case would override that
// field when decoded again (Go's JSON decoder ignores case): MarshalJSON
// refuses it, and a line carrying one does not decode, so a log can never
// hand back another session's event under this one's id.
func TestAnExtraKeyThatCollidesWithAFieldNeverOverridesIt(t *testing.T) {
	e := watchdog.Event{ID: "e1", AggregateID: "s", Kind: watchdog.KindStart, Window: 1,
		Extra: map[string]json.RawMessage{"AGGREGATE_ID": json.RawMessage(`"other"`)}}
	_, err := json.Marshal(e)
	require.ErrorContains(t, err, `collides with the field "aggregate_id"`)

	var got watchdog.Event
	err = json.Unmarshal([]byte(`{"event_id":"e1","aggregate_id":"s","event_kind":"runtime.watchdog.start","window":1,"Window":7}`), &got)
	require.ErrorIs(t, err, watchdog.ErrInvalidEvent)
	assert.ErrorContains(t, err, `"Window" differs from the field "window" only in case`)

	require.NoError(t, json.Unmarshal([]byte(`{"event_id":"e1","aggregate_id":"s","event_kind":"k","window":1,"note":1}`), &got))
	assert.Equal(t, json.RawMessage(`1`), got.Extra["note"], "unknown keys are still kept")
}

// Policy durations in JSON are exact: what is written is what is read, to
// the nanosecond, and a value that cannot be represented is refused, never
// rounded into another meaning (a tiny negative becoming the default, a
// tiny TTL becoming Off).
func TestPolicyJSONDurationsRoundTripExactlyOrAreRefused(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 1500 * time.Millisecond, 104*24*time.Hour + time.Nanosecond,
		math.MaxInt64, 3*time.Second + 7} {
		p := watchdog.Policy{WallClock: d, PhaseBudgets: map[string]time.Duration{"plan": d}, EvidenceTTL: d}
		b, err := json.Marshal(p)
		require.NoError(t, err)
		var q watchdog.Policy
		require.NoError(t, json.Unmarshal(b, &q), "%s", b)
		assert.Equal(t, d, q.WallClock, "%s", b)
		assert.Equal(t, d, q.PhaseBudgets["plan"])
		assert.Equal(t, d, q.EvidenceTTL)
	}
	for text, want := range map[string]time.Duration{`1.5`: 1500 * time.Millisecond, `15e-1`: 1500 * time.Millisecond,
		`0.000000001`: 1, `1E2`: 100 * time.Second, `0`: 0, `9223372036.854775807`: math.MaxInt64} {
		var q watchdog.Policy
		require.NoError(t, json.Unmarshal([]byte(`{"session_wall_clock_seconds":`+text+`}`), &q), text)
		assert.Equal(t, want, q.WallClock, text)
	}
	for _, text := range []string{`-1e-10`, `1e-10`, `0.0000000005`, `9223372036.854775808`, `1e300`, `1e-99999999999999999999`,
		`1` + strings.Repeat("0", 1000) + `e-5000`} {
		for _, knob := range []string{"session_wall_clock_seconds", "agent_idle_activity_evidence_ttl_seconds"} {
			var q watchdog.Policy
			err := json.Unmarshal([]byte(`{"`+knob+`":`+text+`}`), &q)
			require.ErrorIs(t, err, watchdog.ErrInvalidPolicy, "%s = %s", knob, text)
			assert.ErrorContains(t, err, knob)
		}
	}
}

// A start later than the Watchdog's Clock reads, by more than the second
// Start tolerates, is refused with an error that names the start, the
// Clock's reading and the likely mistake; nothing is recorded and the id
// stays free. A start up to a second ahead is taken.
func TestStartRefusesAStartInTheFutureOfTheWatchdogsClock(t *testing.T) {
	store := watchdog.NewMemoryStore()
	w := newWatchdog(t, newMock(), store)
	_, err := w.Start(context.Background(), "s", t0.Add(time.Second+time.Nanosecond), watchdog.Policy{})
	require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	assert.EqualError(t, err, `watchdog: invalid argument: session "s": session_started_at 2026-05-23 09:00:01.000000001 +0000 UTC`+
		` is 1.000000001s later than the Watchdog's Clock, which reads 2026-05-23 09:00:00 +0000 UTC (at most 1s ahead is tolerated);`+
		` under a mock Clock, take the start from that Clock (mock.Now()), not from time.Now()`)
	require.NoError(t, w.Check(context.Background()))
	assert.Empty(t, load(t, store, "s"), "a refused start records nothing")

	s, err := w.Start(context.Background(), "s", t0.Add(time.Second), watchdog.Policy{})
	require.NoError(t, err, "a second ahead is tolerated, and the id is free")
	assert.Equal(t, t0.Add(time.Second), s.StartedAt())
}

// time.Now() given to a Watchdog on a mock clock, the usual mistake, fails
// at Start: on a fresh clock.Mock (1970) as on one set to a fixed date.
func TestStartUnderAMockClockWithTimeNowFailsLoudly(t *testing.T) {
	for name, mock := range map[string]*clock.Mock{"fresh mock (1970)": clock.NewMock(), "mock at a fixed date": newMock()} {
		t.Run(name, func(t *testing.T) {
			w := newWatchdog(t, mock, watchdog.NewMemoryStore())
			_, err := w.Start(context.Background(), "s", time.Now(), watchdog.Policy{WallClock: time.Minute})
			require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
			assert.ErrorContains(t, err, "later than the Watchdog's Clock, which reads "+mock.Now().UTC().String())
			assert.ErrorContains(t, err, "mock.Now()")
			_, err = w.Start(context.Background(), "s", mock.Now(), watchdog.Policy{WallClock: time.Minute})
			require.NoError(t, err)
		})
	}
}

// After a step of the wall clock, a start read from the stepped clock is
// now, not an hour in the future: Start compares on the Watchdog's
// timeline.
func TestStartTakesAStartReadFromASteppedWallClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchdog.New()
		defer w.Close(context.Background())
		watchdog.StepWallClock(w, time.Hour)
		stepped := time.Now().Add(time.Hour) // what time.Now() reads after the step
		s, err := w.Start(context.Background(), "s", stepped, watchdog.Policy{})
		require.NoError(t, err)
		assert.Equal(t, stepped.UTC(), s.StartedAt())
		_, err = w.Start(context.Background(), "later", stepped.Add(2*time.Second), watchdog.Policy{})
		require.ErrorIs(t, err, watchdog.ErrInvalidArgument)
	})
}

// A start in the past is legitimate: its budget is partly spent, and the
// session fires when the rest runs out.
func TestStartInThePastSpendsPartOfTheBudget(t *testing.T) {
	mock := newMock()
	w := newWatchdog(t, mock, watchdog.NewMemoryStore())
	s, err := w.Start(context.Background(), "s", t0.Add(-40*time.Second), watchdog.Policy{WallClock: time.Minute})
	require.NoError(t, err)
	advance(t, mock, 20*time.Second, w)
	require.NoError(t, s.Context().Err(), "exactly the budget has elapsed: not yet over it")
	advance(t, mock, time.Nanosecond, w)
	require.ErrorIs(t, context.Cause(s.Context()), watchdog.ErrWallClockExceeded)
}

// durationKnobs returns the JSON knobs of Policy's durations, from its own
// encoding, so a duration added later is checked too.
func durationKnobs(t *testing.T) []string {
	var p watchdog.Policy
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == reflect.TypeFor[time.Duration]() {
			f.SetInt(int64(time.Second))
		}
	}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	var knobs []string
	for k := range m {
		knobs = append(knobs, k)
	}
	require.Len(t, knobs, 11, "%s", b)
	return knobs
}

// A value of the wrong type is refused with an error naming its knob, for
// every knob; a duration's error names the value too.
func TestPolicyJSONMistypedValueNamesItsKnob(t *testing.T) {
	for _, knob := range durationKnobs(t) {
		for _, v := range []string{`"ten"`, `"10s"`, `true`, `[]`, `{}`} {
			var p watchdog.Policy
			err := json.Unmarshal([]byte(`{"`+knob+`":`+v+`}`), &p)
			require.ErrorIs(t, err, watchdog.ErrInvalidPolicy, "%s = %s", knob, v)
			assert.ErrorContains(t, err, knob+" = "+v+" is not a JSON number of seconds")
		}
	}
	for knob, v := range map[string]string{
		"settle_checks": `"3"`, "recovery_budget": `1.5`, "mode": `3`, "rule_modes": `{"idle":3}`,
		"evidence_channels": `"build"`, "liveness_rules": `[1]`, "continue_when_owner_lost": `"yes"`,
		"wall_clock_supervised_only": `1`, "workspace_root": `true`, "workspace_ignore": `"*.log"`,
		"phase_budgets_seconds": `{"plan":"ten"}`,
	} {
		var p watchdog.Policy
		err := json.Unmarshal([]byte(`{"`+knob+`":`+v+`}`), &p)
		require.ErrorIs(t, err, watchdog.ErrInvalidPolicy, "%s = %s", knob, v)
		assert.ErrorContains(t, err, knob, "%s = %s", knob, v)
	}
}

// A duration written as a string of digits is refused, never read as
// seconds; the number itself is read, and null still means the default.
func TestPolicyJSONDigitStringDurationIsRefused(t *testing.T) {
	var p watchdog.Policy
	err := json.Unmarshal([]byte(`{"no_output_deadline_seconds":"10"}`), &p)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.EqualError(t, err, `watchdog: invalid policy: no_output_deadline_seconds = "10" is not a JSON number of seconds (write 10 or 1.5, unquoted)`)
	err = json.Unmarshal([]byte(`{"phase_budgets_seconds":{"plan":"5"}}`), &p)
	require.ErrorIs(t, err, watchdog.ErrInvalidPolicy)
	assert.ErrorContains(t, err, `phase_budgets_seconds[plan] = "5" is not a JSON number`)

	require.NoError(t, json.Unmarshal([]byte(`{"no_output_deadline_seconds":10,"phase_budgets_seconds":{"plan":5}}`), &p))
	assert.Equal(t, watchdog.Policy{IdleWindow: 10 * time.Second, PhaseBudgets: map[string]time.Duration{"plan": 5 * time.Second}}, p)
	p = watchdog.Policy{}
	require.NoError(t, json.Unmarshal([]byte(`{"no_output_deadline_seconds":null,"agent_idle_activity_evidence_ttl_seconds":null}`), &p))
	assert.Equal(t, watchdog.Policy{}, p)
}
