package memlog

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rec is a record of every kind of field a Codec lists.
type rec struct {
	Name, Other string
	Text        string
	Ref         string
	N           int
	U           uint64
	F, G, H     float64
	B           bool
	BP          *bool
	Raw         []byte
	At, At2     time.Time
	AtP         *time.Time
	Entries     []entry
	Ptr         *int
	Map         map[string]int
}

type entry struct {
	Name string
	At   *time.Time
	U    uint64
	F    float64
}

func recFields(c *Codec, r *rec) {
	c.Times(&r.At, &r.At2)
	c.Strs(&r.Name, &r.Other)
	c.Texts(&r.Text)
	c.IDs(&r.Ref)
	c.Ints(&r.N)
	c.Uints(&r.U)
	c.Floats(&r.F, &r.G, &r.H)
	c.Bools(&r.B)
	c.BoolPtr(&r.BP)
	c.Bytes(&r.Raw)
	c.TimePtr(&r.AtP)
	Slice(c, &r.Entries, func(c *Codec, e *entry) {
		c.Strs(&e.Name)
		c.TimePtr(&e.At)
		c.Uints(&e.U)
		c.Floats(&e.F)
	})
	Ref(c, &r.Ptr, r.Ptr != nil)
	Ref(c, &r.Map, r.Map != nil)
}

func write(l *Log, id string, seq uint64, r *rec) uint64 {
	recFields(l.Write(id), r)
	return l.Commit(seq)
}

func read(t *testing.T, l *Log, h uint64) (string, uint64, rec) {
	t.Helper()
	var r rec
	id, seq := Read(l, h, &r, func(c *Codec, r *rec) {
		recFields(c, r)
		if len(c.buf) != 0 {
			t.Fatalf("%d bytes left unread", len(c.buf))
		}
	})
	return id, seq, r
}

var t0 = time.Date(2026, 5, 23, 9, 0, 0, 1, time.UTC)

func ptr[T any](v T) *T { return &v }

// same fails unless got is want exactly: reflect.DeepEqual, and the bits
// of every float (DeepEqual takes -0 for 0 and no NaN for itself).
func same(t *testing.T, what string, got, want rec) {
	t.Helper()
	fb := func(r rec) []uint64 {
		out := []uint64{math.Float64bits(r.F), math.Float64bits(r.G), math.Float64bits(r.H)}
		for _, e := range r.Entries {
			out = append(out, math.Float64bits(e.F))
		}
		return out
	}
	if !reflect.DeepEqual(fb(got), fb(want)) {
		t.Fatalf("%s: floats %x, want %x", what, fb(got), fb(want))
	}
	got.F, got.G, got.H, want.F, want.G, want.H = 0, 0, 0, 0, 0, 0
	got.Entries, want.Entries = slices.Clone(got.Entries), slices.Clone(want.Entries)
	for i := range got.Entries {
		got.Entries[i].F = 0
	}
	for i := range want.Entries {
		want.Entries[i].F = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

func TestRecordsReadBackAsWritten(t *testing.T) {
	local := time.FixedZone("X", 3600)
	cases := map[string]rec{
		"zero": {},
		"all set": {Name: "kind", Other: "reason", Text: "some text", Ref: "abc-123", N: -5, U: math.MaxUint64,
			F: 1.000000001, G: 1, H: 1.000000001, B: true, BP: ptr(false), Raw: []byte(`{"a":1}`),
			At: t0, At2: t0.Add(-time.Hour), AtP: ptr(t0.Add(time.Second)),
			Entries: []entry{{Name: "stdout"}, {Name: "mcp", At: ptr(t0), U: 7, F: 0.5}, {}},
			Ptr:     ptr(3), Map: map[string]int{"a": 1}},
		"empty, not nil":  {Raw: []byte{}, Entries: []entry{}, Map: map[string]int{}},
		"true":            {BP: ptr(true)},
		"negative zero":   {F: math.Copysign(0, -1), Entries: []entry{{F: math.Copysign(0, -1)}}},
		"odd floats":      {F: math.NaN(), G: math.Inf(-1), H: math.SmallestNonzeroFloat64, Entries: []entry{{F: math.MaxFloat64}}},
		"repeated floats": {F: 2.5, G: 2.5, H: 1.1, Entries: []entry{{F: 1.1}, {F: 2.5}}},
		"times as given": {At: time.Now(), At2: t0.In(local), AtP: ptr(time.Time{}),
			Entries: []entry{{At: ptr(time.Unix(0, 0))}, {At: ptr(time.Time{}.In(local))}}},
		"far times": {At: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), At2: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
			AtP: ptr(time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC))},
		"apart times": {At: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), At2: time.Date(2260, 1, 1, 0, 0, 0, 0, time.UTC)},
		"ids":         {Ref: "0"},
		"long name":   {Name: strings.Repeat("n", maxInternLen+1), Other: "\x00\xff"},
	}
	l := New()
	hs := map[string]uint64{}
	seq := uint64(0)
	for name, r := range cases {
		seq++
		hs[name] = write(l, "id-"+strconv.FormatUint(seq, 10), seq, &r)
	}
	check := func(when string) {
		for name, h := range hs {
			id, gotSeq, got := read(t, l, h)
			n, _ := strconv.ParseUint(strings.TrimPrefix(id, "id-"), 10, 64)
			if gotSeq != n {
				t.Fatalf("%s: %s: id %s, seq %d", when, name, id, gotSeq)
			}
			same(t, when+": "+name, got, cases[name])
		}
	}
	check("written")
	refs := liveRefs(l)
	// Compaction moves them all.
	for i := range minDead {
		l.Drop(write(l, "x"+strconv.Itoa(i), 1000+uint64(i), &rec{Name: "dropped", Ptr: ptr(i)}))
	}
	idx := &handles{hs: hs}
	l.Compact(idx)
	if !idx.shrunk {
		t.Fatal("no compaction with most records dropped")
	}
	if liveRefs(l) != refs || len(l.refs) != refs || l.Len() != len(cases) {
		t.Fatalf("after compaction: references of %d records, %d records; want %d and %d", liveRefs(l), l.Len(), refs, len(cases))
	}
	check("compacted")
}

// An instant in UTC without a monotonic reading is kept as nanoseconds, in
// a few bytes: not by reference.
func TestUTCInstantsAreCompact(t *testing.T) {
	l := New()
	r := rec{At: t0, At2: t0.Add(-time.Hour), AtP: ptr(t0.Add(time.Second)), Entries: []entry{{At: ptr(t0)}}}
	h := write(l, "a-1", 1, &r)
	if liveRefs(l) != 0 {
		t.Fatal("instants in UTC kept by reference")
	}
	if n := len(l.chunks[0]); n > 40 {
		t.Fatalf("a record of four instants takes %d bytes", n)
	}
	_, _, got := read(t, l, h)
	same(t, "instants", got, r)
}

// handles is an index of records by name.
type handles struct {
	hs     map[string]uint64
	shrunk bool
}

func (x *handles) All(fn func(*uint64)) {
	for name, h := range x.hs {
		fn(&h)
		x.hs[name] = h
	}
}

func (x *handles) Shrink() { x.shrunk = true }

func TestCompactWaitsForHalf(t *testing.T) {
	l := New()
	var hs []uint64
	for i := range 3 * minDead {
		hs = append(hs, write(l, "e"+strconv.Itoa(i), uint64(i+1), &rec{N: i}))
	}
	for _, h := range hs[:minDead] {
		l.Drop(h)
	}
	idx := &handles{}
	l.Compact(idx)
	if idx.shrunk {
		t.Fatal("compacted with a third of the records dropped")
	}
}

func TestIDs(t *testing.T) {
	l := New()
	ids := []string{"p-1", "p-2", "p-01", "p-0", "p-", "1", "x", "p-9999999999999999999", "p-18446744073709551615",
		"p-" + strings.Repeat("9", 25), "q-1", "p-1x", "ü-7", strings.Repeat("p", maxInternLen+1) + "5"}
	hs := map[string]uint64{}
	for i, id := range ids {
		if l.Has(id) {
			t.Fatalf("%q held before it was written", id)
		}
		hs[id] = write(l, id, uint64(i+1), &rec{Ref: id})
		for _, other := range ids[i+1:] {
			if l.Has(other) {
				t.Fatalf("%q held once %q is written", other, id)
			}
		}
	}
	for id, h := range hs {
		if !l.Has(id) {
			t.Fatalf("%q not held", id)
		}
		got, _, r := read(t, l, h)
		if got != id || r.Ref != id {
			t.Fatalf("read back %q and %q, want %q", got, r.Ref, id)
		}
	}
	l.Drop(hs["p-1"])
	l.Drop(hs["x"])
	if l.Has("p-1") || l.Has("x") || !l.Has("p-2") || !l.Has("p-0") {
		t.Fatal("Drop forgot the wrong ids")
	}
}

// Once the table is full, strings are kept inline, ids as strings: and an
// id is held by one set or the other whatever came first.
func TestInternTableFull(t *testing.T) {
	l := New()
	for i := range maxInterned {
		write(l, "a"+strconv.Itoa(i)+"-1", uint64(i+1), &rec{})
	}
	h := write(l, "late-1", maxInterned+1, &rec{Name: "late name"})
	if !l.Has("late-1") || l.Has("late-2") || !l.Has("a7-1") || l.Has("a7-2") {
		t.Fatal("ids held wrong with a full table")
	}
	if _, _, r := read(t, l, h); r.Name != "late name" {
		t.Fatalf("name %q", r.Name)
	}
	if len(l.strs.list) != maxInterned {
		t.Fatalf("%d strings interned, want at most %d", len(l.strs.list), maxInterned)
	}
}

// A record that lists too many fields panics, and leaves no trace: its id
// is not held, the next record is written.
func TestTooManyFieldsPanics(t *testing.T) {
	l := New()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		r := rec{Ptr: ptr(1)}
		c := l.Write("x-1")
		Ref(c, &r.Ptr, true)
		Slice(c, &[]entry{{}}, func(c *Codec, _ *entry) {
			for range 9 {
				c.Ints(&r.N)
			}
		})
	}()
	if l.Has("x-1") || l.Len() != 0 {
		t.Fatal("the record that panicked is held")
	}
	h := write(l, "x-1", 1, &rec{N: 3})
	if id, _, r := read(t, l, h); id != "x-1" || r.N != 3 || liveRefs(l) != 0 {
		t.Fatalf("read back %q, %d; references of %d records", id, r.N, liveRefs(l))
	}
}

func TestSeqsMustIncrease(t *testing.T) {
	l := New()
	write(l, "a-2", 2, &rec{Ptr: ptr(1)})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	write(l, "a-1", 1, &rec{Ptr: ptr(1)})
}

// liveRefs returns how many records keep something by reference.
func liveRefs(l *Log) int {
	n := 0
	for _, r := range l.refs {
		if r.v != nil {
			n++
		}
	}
	return n
}

func TestDropReleasesReferences(t *testing.T) {
	l := New()
	h := write(l, "a-1", 1, &rec{Ptr: ptr(1), At: time.Now()})
	if liveRefs(l) != 1 {
		t.Fatalf("%d references", liveRefs(l))
	}
	l.Drop(h)
	if liveRefs(l) != 0 || l.Has("a-1") {
		t.Fatal("Drop kept the record's references or id")
	}
}
