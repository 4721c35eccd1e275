package main

import (
	"bytes"
	"context"
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
	err := run(context.Background(), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
