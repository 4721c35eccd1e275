package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The crash test re-executes the test binary as a child process that appends
// to a Store and is killed with SIGKILL. The child prints each event id
// after its Append returned; the parent checks that every such event
// survives the next Open, and that a torn last line is truncated.
const (
	crashEnvPath = "WATCHDOG_FILESTORE_CRASH_PATH"
	crashEnvMode = "WATCHDOG_FILESTORE_CRASH_MODE"
	crashEnvRun  = "WATCHDOG_FILESTORE_CRASH_ROUND"
)

func crashChild() {
	path, mode, round := os.Getenv(crashEnvPath), os.Getenv(crashEnvMode), os.Getenv(crashEnvRun)
	policy := SyncOnClose
	if mode == "loop-fsync" {
		policy = SyncEveryAppend
	}
	s, err := Open(path, WithSync(policy))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(3)
	}
	if mode == "hook" {
		// Die in the middle of a write: half the line reaches the file,
		// then the parent's SIGKILL arrives.
		n := 0
		fileWrite = func(f *os.File, b []byte) (int, error) {
			n++
			if n < 4 {
				return f.Write(b)
			}
			w, err := f.Write(b[:len(b)/2])
			fmt.Printf("MIDWRITE %d %d\n", w, len(b))
			if err != nil {
				os.Exit(4)
			}
			select {} // wait for SIGKILL
		}
	}
	blob, _ := json.Marshal(strings.Repeat("x", 256<<10)) // 256 KiB lines: a write(2) of some length
	for i := 0; ; i++ {
		e := watchdog.Event{
			ID: fmt.Sprintf("r%s-e%d", round, i), AggregateID: "crash",
			Kind: watchdog.KindResume, Window: 1, SessionStartedAt: time.Unix(0, 0).UTC(),
			Extra: map[string]json.RawMessage{"x_blob": blob},
		}
		if err := s.Append(context.Background(), e); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(5)
		}
		fmt.Println("ACK", e.ID)
	}
}

// runCrashChild starts the child, kills it with SIGKILL after kill returns
// true for a line of its output, and returns the ids it acknowledged.
func runCrashChild(t *testing.T, path, mode string, round int, kill func(line string, acks int) bool) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreSurvivesSIGKILLMidWrite$", "-test.count=1") //watchdog:unbounded the test SIGKILLs it mid-write
	cmd.Env = append(os.Environ(), crashEnvPath+"="+path, crashEnvMode+"="+mode, fmt.Sprintf("%s=%d", crashEnvRun, round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acks []string
	killed := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "ACK "); ok {
			acks = append(acks, id)
		}
		if strings.HasPrefix(line, "ERROR") {
			t.Errorf("child: %s", line)
		}
		if !killed && kill(line, len(acks)) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v (killed=%v); stderr:\n%s", err, killed, stderr.String())
	}
	return acks
}

// checkAfterCrash reopens the store and checks that every acknowledged event
// is there, in order, and that the file now ends on a complete line.
func checkAfterCrash(t *testing.T, path string, acked []string, crashes int) *TornTail {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	evs, err := s.Load(context.Background(), "crash")
	if err != nil {
		t.Fatal(err)
	}
	have := make(map[string]bool, len(evs))
	var prev uint64
	for _, e := range evs {
		have[e.ID] = true
		if e.Seq <= prev {
			t.Fatalf("seq %d after %d", e.Seq, prev)
		}
		prev = e.Seq
	}
	for _, id := range acked {
		if !have[id] {
			t.Fatalf("event %s was acknowledged before SIGKILL but is lost (%d events survive)", id, len(evs))
		}
	}
	if len(evs) > len(acked)+crashes {
		t.Fatalf("%d events survive, but only %d were acknowledged (at most one more per crash can have been complete)", len(evs), len(acked))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		t.Fatal("the file does not end with a newline after the repair")
	}
	return s.TornTail()
}

func TestFileStoreSurvivesSIGKILLMidWrite(t *testing.T) {
	if os.Getenv(crashEnvPath) != "" {
		crashChild()
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}

	// Deterministic: the child dies with exactly half of its fourth line
	// written.
	t.Run("half a line written", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "events.jsonl")
		var half int64
		acked := runCrashChild(t, path, "hook", 0, func(line string, _ int) bool {
			var w, n int64
			if _, err := fmt.Sscanf(line, "MIDWRITE %d %d", &w, &n); err == nil {
				half = w
				return true
			}
			return false
		})
		if len(acked) != 3 {
			t.Fatalf("acknowledged %d events, want 3", len(acked))
		}
		torn := checkAfterCrash(t, path, acked, 1)
		if torn == nil || torn.Line != 4 || torn.Bytes != half {
			t.Fatalf("torn tail = %v, want line 4 with %d bytes", torn, half)
		}
	})

	// Realistic: a child appending 256 KiB lines in a loop is killed at
	// whatever point it has reached, several times over the same file; the
	// store resumes after each crash. Whether a kill lands inside a write is
	// up to the scheduler, so a torn tail is reported, not required.
	for _, mode := range []string{"loop", "loop-fsync"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			var all []string
			torn := 0
			for round := range 4 {
				acked := runCrashChild(t, path, mode, round, func(_ string, acks int) bool { return acks >= 3 })
				all = append(all, acked...)
				if checkAfterCrash(t, path, all, round+1) != nil {
					torn++
				}
			}
			t.Logf("%s: %d acknowledged events survived 4 SIGKILLs; %d kills landed mid-line", mode, len(all), torn)
		})
	}
}
