package watchdog

import (
	"reflect"
	"testing"
	"time"
)

// Policy.same decides whether sessions share a resolved config: it must look
// at every field, or a session could run under another session's policy.
func TestPolicySameCoversEveryField(t *testing.T) {
	var zero Policy
	typ := reflect.TypeFor[Policy]()
	for i := range typ.NumField() {
		var q Policy
		f := reflect.ValueOf(&q).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int64, reflect.Int:
			f.SetInt(1)
		case reflect.String:
			f.SetString("x")
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.Zero(f.Type().Key()), reflect.Zero(f.Type().Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("field %s: kind %s not handled by this test", typ.Field(i).Name, f.Kind())
		}
		if zero.same(&q) || q.same(&zero) {
			t.Errorf("Policy.same ignores field %s", typ.Field(i).Name)
		}
		if !q.same(&q) {
			t.Errorf("Policy.same: a policy differs from itself in field %s", typ.Field(i).Name)
		}
	}
}

func TestSessionsShareConfigOnlyForTheSamePolicy(t *testing.T) {
	w := New()
	defer w.Close(t.Context())
	p := Policy{WallClock: time.Hour, RuleModes: map[string]Mode{ruleIdle: ModeShadow}}
	a, err := w.Start(t.Context(), "a", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Start(t.Context(), "b", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg != b.cfg {
		t.Error("two sessions under the same Policy value do not share their config")
	}
	q := p
	q.RuleModes = map[string]Mode{ruleIdle: ModeAct}
	c, err := w.Start(t.Context(), "c", time.Now(), q)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg == a.cfg || c.cfg.limits.Shadow == a.cfg.limits.Shadow {
		t.Error("a session under another RuleModes map got the first policy's config")
	}
	// A map changed in place after a Start is a different policy, and the
	// first session keeps the policy it was started with.
	p.RuleModes[ruleIdle] = ModeAct
	d, err := w.Start(t.Context(), "d", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg == a.cfg || a.cfg.policy.RuleModes[ruleIdle] != ModeShadow {
		t.Error("a policy map changed in place reused or changed the first session's config")
	}
	if FromContext(c.Context()) != c {
		t.Error("FromContext does not find the session")
	}
}
