package index

import (
	"strconv"
	"testing"
)

type val struct {
	id   string
	slot int32
}

func newIndex() *Index[val] {
	return &Index[val]{Key: func(v *val) string { return v.id }, Slot: func(v *val) *int32 { return &v.slot }}
}

func TestPutGetDelAndReuseOfSlots(t *testing.T) {
	for _, collide := range []bool{false, true} {
		x := newIndex()
		if collide { // every id in one chain
			x.hashOf = func(string) uint64 { return 7 }
		}
		ss := make([]*val, 50)
		for i := range ss {
			ss[i] = &val{id: "s" + strconv.Itoa(i)}
			x.Put(ss[i])
		}
		for i := 0; i < len(ss); i += 3 { // from the middle, the head and the tail of chains
			x.Del(ss[i])
		}
		x.Del(&val{id: "s1"}) // another session under a watched id: no effect
		for i, s := range ss {
			got := x.Get(s.id)
			if want := i%3 != 0; (got == s) != want || (got != nil && got != s) {
				t.Fatalf("collide=%v: get(%s) = %p, watched %v", collide, s.id, got, want)
			}
		}
		if x.Get("nope") != nil || x.Len() != 33 || len(x.All()) != 33 {
			t.Fatalf("collide=%v: len %d, all %d", collide, x.Len(), len(x.All()))
		}
		x.Put(ss[0]) // reuses a free slot
		if x.Get("s0") != ss[0] || x.Len() != 34 {
			t.Fatalf("collide=%v: put after del", collide)
		}
		for _, s := range x.All() {
			x.Del(s)
		}
		if x.Len() != 0 || x.Get("s2") != nil || len(x.slots) != 0 {
			t.Fatalf("collide=%v: not empty after deleting all", collide)
		}
		x.Put(ss[1])
		x.Reset()
		if x.Get("s1") != nil {
			t.Fatalf("collide=%v: reset", collide)
		}
	}
}

// TestIndexAgreesWithAMap puts and deletes sessions at random, with few
// distinct hashes so that probe runs wrap and overlap, and checks every
// lookup against a map.
func TestIndexAgreesWithAMap(t *testing.T) {
	for _, hashes := range []uint64{3, 64, 1 << 62} {
		x := newIndex()
		x.hashOf = func(id string) uint64 {
			var h uint64 = 14695981039346656037
			for i := 0; i < len(id); i++ {
				h = (h ^ uint64(id[i])) * 1099511628211
			}
			return h % hashes
		}
		want := map[string]*val{}
		r := uint64(1)
		for step := range 20000 {
			r = r*6364136223846793005 + 1442695040888963407
			id := "s" + strconv.Itoa(int(r>>40)%300)
			if s := want[id]; s != nil && r>>20&1 == 0 {
				x.Del(s)
				delete(want, id)
			} else if s == nil {
				s = &val{id: id}
				x.Put(s)
				want[id] = s
			}
			if step%97 == 0 {
				for i := range 300 {
					id := "s" + strconv.Itoa(i)
					if got := x.Get(id); got != want[id] {
						t.Fatalf("hashes %d, step %d: get(%s) = %p, want %p", hashes, step, id, got, want[id])
					}
				}
				if x.Len() != len(want) {
					t.Fatalf("hashes %d, step %d: len %d, want %d", hashes, step, x.Len(), len(want))
				}
			}
		}
	}
}
