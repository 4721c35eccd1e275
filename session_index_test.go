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
