package watchdog

import (
	"reflect"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog/internal/memlog"
)

// fill sets every field of the value v points to, recursively, to a value
// that is not its zero value.
func fill(t *testing.T, v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(*n) * int64(time.Second))
		} else {
			v.SetInt(int64(*n))
		}
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[[]byte]() || v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(`{"n":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, n)
		fill(t, e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 5, 23, 9, 0, *n, *n, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			fill(t, v.Field(i), n)
		}
	default:
		t.Fatalf("fill: %s of kind %s: add it", v.Type(), v.Kind())
	}
}

// Every field of an event, and of what it holds, is kept in its record: a
// field added to Event and not to recordFields fails here.
func TestRecordFieldsKeepEveryField(t *testing.T) {
	var e Event
	n := 0
	fill(t, reflect.ValueOf(&e).Elem(), &n)
	l := memlog.New()
	recordFields(l.Write(e.ID), &e)
	h := l.Commit(e.Seq)
	got := Event{AggregateID: e.AggregateID}
	got.ID, got.Seq = memlog.Read(l, h, &got, recordFields)
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("read back\n%#v\nwant\n%#v", got, e)
	}
}
