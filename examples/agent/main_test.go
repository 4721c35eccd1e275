//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMain lets the test binary play the agent and its helper too: the
// orchestrator re-executes os.Executable, which is this binary under go test.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "agent":
		os.Exit(agent())
	case "helper":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStory runs the whole example against real processes: the slow tool
// call and the quiet file work are waited for, the hung tool call hits its
// deadline, and the silent hang is cut with the agent's process group.
func TestStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about five seconds")
	}
	var out bytes.Buffer
	log := filepath.Join(t.TempDir(), "events.jsonl")
	err := orchestrate(context.Background(), &out, log)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(log); err != nil || !bytes.Contains(b, []byte(`"event_kind":"runtime.watchdog.cancel"`)) {
		t.Errorf("the -log file lacks the cancel event (%v):\n%s", err, b)
	}
}
