package watchdog

import (
	"strconv"
	"testing"
)

func TestSessionIndex(t *testing.T) {
	for _, collide := range []bool{false, true} {
		var x sessionIndex
		if collide { // every id in one chain
			x.hashOf = func(string) uint64 { return 7 }
		}
		ss := make([]*Session, 50)
		for i := range ss {
			ss[i] = &Session{id: "s" + strconv.Itoa(i)}
			x.put(ss[i])
		}
		for i := 0; i < len(ss); i += 3 { // from the middle, the head and the tail of chains
			x.del(ss[i])
		}
		x.del(&Session{id: "s1"}) // another session under a watched id: no effect
		for i, s := range ss {
			got := x.get(s.id)
			if want := i%3 != 0; (got == s) != want || (got != nil && got != s) {
				t.Fatalf("collide=%v: get(%s) = %p, watched %v", collide, s.id, got, want)
			}
		}
		if x.get("nope") != nil || x.len() != 33 || len(x.all()) != 33 {
			t.Fatalf("collide=%v: len %d, all %d", collide, x.len(), len(x.all()))
		}
		x.put(ss[0]) // reuses a free slot
		if x.get("s0") != ss[0] || x.len() != 34 {
			t.Fatalf("collide=%v: put after del", collide)
		}
		for _, s := range x.all() {
			x.del(s)
		}
		if x.len() != 0 || x.get("s2") != nil || len(x.slots) != 0 {
			t.Fatalf("collide=%v: not empty after deleting all", collide)
		}
		x.put(ss[1])
		x.reset()
		if x.get("s1") != nil {
			t.Fatalf("collide=%v: reset", collide)
		}
	}
}

// TestSessionIndexAgainstAMap puts and deletes sessions at random, with few
// distinct hashes so that probe runs wrap and overlap, and checks every
// lookup against a map.
func TestSessionIndexAgainstAMap(t *testing.T) {
	for _, hashes := range []uint64{3, 64, 1 << 62} {
		var x sessionIndex
		x.hashOf = func(id string) uint64 {
			var h uint64 = 14695981039346656037
			for i := 0; i < len(id); i++ {
				h = (h ^ uint64(id[i])) * 1099511628211
			}
			return h % hashes
		}
		want := map[string]*Session{}
		r := uint64(1)
		for step := range 20000 {
			r = r*6364136223846793005 + 1442695040888963407
			id := "s" + strconv.Itoa(int(r>>40)%300)
			if s := want[id]; s != nil && r>>20&1 == 0 {
				x.del(s)
				delete(want, id)
			} else if s == nil {
				s = &Session{id: id}
				x.put(s)
				want[id] = s
			}
			if step%97 == 0 {
				for i := range 300 {
					id := "s" + strconv.Itoa(i)
					if got := x.get(id); got != want[id] {
						t.Fatalf("hashes %d, step %d: get(%s) = %p, want %p", hashes, step, id, got, want[id])
					}
				}
				if x.len() != len(want) {
					t.Fatalf("hashes %d, step %d: len %d, want %d", hashes, step, x.len(), len(want))
				}
			}
		}
	}
}
