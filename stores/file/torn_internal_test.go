package file

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// Open recognises a torn tail by how the store's lines begin (lineStarts):
// every line encodeLine writes begins with the first of them, whatever the
// event holds, and any cut of it before its newline is a torn event. If the codec's field order changes, lineStarts must gain the
// new beginning (and keep the old ones, for files already written).
func TestEveryLineTheStoreWritesIsATornEventWhenCut(t *testing.T) {
	t0 := time.Date(2026, 5, 23, 9, 0, 0, 0, time.UTC)
	for _, e := range []watchdog.Event{
		{ID: "e1", Seq: 1, AggregateID: "s", Kind: watchdog.KindStart, Window: 1},
		{ID: `"quoted" \ id`, Seq: math.MaxUint64, AggregateID: "s", Kind: watchdog.KindCancel, Window: 7, Reason: "wall_clock_exceeded",
			SessionStartedAt: t0, OccurredAt: t0, Extra: map[string]json.RawMessage{"a_first": json.RawMessage(`1`)}},
	} {
		var buf bytes.Buffer
		if err := encodeLine(&buf, e); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(buf.Bytes(), lineStarts[0]) {
			t.Fatalf("line %q does not begin with %s", buf.Bytes(), lineStarts[0])
		}
		// Cut anywhere before its newline, the line is a torn event.
		f := &Store{}
		f.newIndex()
		for n := 1; n < buf.Len(); n++ {
			if err := f.tornEvent(buf.Bytes()[:n], n%2 == 0); err != nil {
				t.Fatalf("line cut to %q: %v", buf.Bytes()[:n], err)
			}
		}
	}
}
