package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestStory runs the example on the real clock (about three seconds): an
// iteration deadline retried by RunPhase, a wall-clock cancel of window 1,
// and a resume that completes in window 2.
func TestStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs on the real clock for about three seconds")
	}
	var out bytes.Buffer
	log := filepath.Join(t.TempDir(), "events.jsonl")
	err := run(context.Background(), &out, log)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(log); err != nil || !bytes.Contains(b, []byte(`"event_kind":"runtime.watchdog.resume"`)) {
		t.Errorf("the -log file lacks the resume event (%v):\n%s", err, b)
	}
}
