package memlog

import "strings"

const (
	maxInterned  = 4096 // strings interned at most: the others are kept inline
	maxInternLen = 256  // the longest string interned
)

// strTable interns strings. It never forgets one: it holds at most
// maxInterned, of at most maxInternLen bytes.
type strTable struct {
	list  []string
	index map[string]uint32
	cache [64][2]cached // the last two strings found at each slot, as given
}

type cached struct {
	s string
	i uint32
}

// find returns the index of s, which is not "", interned if it is not and
// add says so; false if it is not interned. slot numbers the field of s in
// its record: a record like the last ones finds its strings in the cache.
func (t *strTable) find(s string, slot int, add bool) (uint32, bool) {
	ce := &t.cache[slot%len(t.cache)]
	if ce[0].s == s {
		return ce[0].i, true
	}
	if ce[1].s == s {
		ce[0], ce[1] = ce[1], ce[0]
		return ce[0].i, true
	}
	i, ok := t.index[s]
	if !ok {
		if !add || len(s) > maxInternLen || len(t.list) >= maxInterned {
			return 0, false
		}
		i = uint32(len(t.list))
		t.list = append(t.list, strings.Clone(s)) // not a part of a larger string
		t.index[t.list[i]] = i
	}
	// The cache holds s itself: the next record's strings are likely the
	// same ones, which compare in no time.
	ce[0], ce[1] = cached{s, i}, ce[0]
	return i, true
}

// idKey is an event id made of an interned prefix and a counter: the
// prefix followed by the counter in decimal, without leading zeros.
type idKey struct {
	prefix uint32
	n      uint64
	ok     bool // false: the id is not of that form, or its prefix not interned
}

// idSet is a set of event ids: those of the form of an idKey in bitmaps,
// the others as strings.
type idSet struct {
	pages    map[pageKey]*page
	last     pageKey
	lastPage *page
	other    map[string]struct{}
}

// page holds the ids of one prefix whose counters differ only in their
// lowest 9 bits.
type page [8]uint64

type pageKey struct {
	prefix uint32
	n      uint64 // the counters' bits above the lowest 9
}

// key returns id's key, with its prefix interned if add says so (slot as
// for strTable.find: 0 for a record's own id). The key of an id the set
// holds does not change: a prefix interned stays so, and one not interned
// when its id was added (the table full, or the prefix too long) never is.
func (*idSet) key(t *strTable, id string, slot int, add bool) idKey {
	i := len(id)
	for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
		i--
	}
	d := len(id) - i
	if i == 0 || d == 0 || d > 19 || d > 1 && id[i] == '0' {
		return idKey{}
	}
	var n uint64
	for _, b := range []byte(id[i:]) {
		n = n*10 + uint64(b-'0')
	}
	p, ok := t.find(id[:i], slot, add)
	return idKey{p, n, ok}
}

func (s *idSet) page(k idKey, add bool) *page {
	pk := pageKey{k.prefix, k.n >> 9}
	if s.lastPage != nil && s.last == pk {
		return s.lastPage
	}
	p := s.pages[pk]
	if p == nil && add {
		p = new(page)
		s.pages[pk] = p
	}
	if p != nil {
		s.last, s.lastPage = pk, p
	}
	return p
}

func (s *idSet) has(k idKey, id string) bool {
	if !k.ok {
		_, ok := s.other[id]
		return ok
	}
	p := s.page(k, false)
	return p != nil && p[k.n>>6&7]&(1<<(k.n&63)) != 0
}

func (s *idSet) add(k idKey, id string) {
	if !k.ok {
		s.other[id] = struct{}{}
		return
	}
	p := s.page(k, true)
	p[k.n>>6&7] |= 1 << (k.n & 63)
}

func (s *idSet) remove(k idKey, id string) {
	if !k.ok {
		delete(s.other, id)
		return
	}
	p := s.page(k, false)
	if p == nil {
		return
	}
	p[k.n>>6&7] &^= 1 << (k.n & 63)
	if *p == (page{}) {
		delete(s.pages, pageKey{k.prefix, k.n >> 9})
		s.lastPage = nil
	}
}

// shrink rebuilds the set's maps at their current sizes.
func (s *idSet) shrink() {
	pages := make(map[pageKey]*page, len(s.pages))
	for k, p := range s.pages {
		pages[k] = p
	}
	other := make(map[string]struct{}, len(s.other))
	for id := range s.other {
		other[id] = struct{}{}
	}
	s.pages, s.other = pages, other
}
