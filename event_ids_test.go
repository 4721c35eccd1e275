package watchdog

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEventIDsArePrefixAndSequenceAcrossBlocks(t *testing.T) {
	x := eventIDs{prefix: "run-"}
	for i := 1; i <= 3*idBlockMax+5; i++ {
		require.Equal(t, "run-"+strconv.Itoa(i), x.nextID())
	}
}

func TestEventIDsWithALongPrefixStayCorrect(t *testing.T) {
	long := strings.Repeat("p", 3*idBlockBytes)
	x := eventIDs{prefix: long}
	for i := 1; i <= 5; i++ {
		require.Equal(t, long+strconv.Itoa(i), x.nextID())
	}
}

func TestEventIDsAreUniqueUnderConcurrentUse(t *testing.T) {
	x := eventIDs{prefix: "c-"}
	const goroutines, each = 8, 500
	got := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				got[g] = append(got[g], x.nextID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, ids := range got {
		for _, id := range ids {
			require.False(t, seen[id], "id %s handed out twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, goroutines*each)
	for i := 1; i <= goroutines*each; i++ {
		require.True(t, seen["c-"+strconv.Itoa(i)])
	}
}
