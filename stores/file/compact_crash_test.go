package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// The compaction crash test re-executes the test binary as a child that
// appends to a Store with a retention until a compaction starts, and stops
// at one of its steps (compactStep), where the parent kills it with
// SIGKILL. The parent then checks that the file opens, that every event the
// child acknowledged is there unless the retention forgets it, and that the
// store goes on.
const (
	compactCrashEnvPath = "WATCHDOG_FILESTORE_COMPACT_CRASH_PATH"
	compactCrashEnvStep = "WATCHDOG_FILESTORE_COMPACT_CRASH_STEP"
)

var compactCrashRetention = watchdog.Retention{KeepWindows: 1}

func compactCrashChild() {
	path, step := os.Getenv(compactCrashEnvPath), os.Getenv(compactCrashEnvStep)
	compactStep = func(s string) {
		if s == step {
			fmt.Println("STEP", s)
			select {} // wait for SIGKILL
		}
	}
	s, err := Open(path, WithRetention(compactCrashRetention))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(3)
	}
	blob, _ := json.Marshal(strings.Repeat("x", 64<<10))
	ev := func(id, agg, kind string, window int) watchdog.Event {
		return watchdog.Event{ID: id, AggregateID: agg, Kind: kind, Window: window, SessionStartedAt: time.Unix(0, 0).UTC(),
			OpensWindow: kind == watchdog.KindStart || kind == watchdog.KindResume, Extra: map[string]json.RawMessage{"x_blob": blob}}
	}
	ctx := context.Background()
	if err := s.Append(ctx, ev("keep-start", "keep", watchdog.KindStart, 1)); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(5)
	}
	fmt.Println("ACK keep-start")
	for w := 1; ; w++ {
		open, stop := fmt.Sprintf("open-%d", w), fmt.Sprintf("stop-%d", w)
		if err := s.Append(ctx, ev(open, "cyc", watchdog.KindResume, w), ev(stop, "cyc", watchdog.KindStop, w)); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(5)
		}
		fmt.Println("ACK", open, stop)
	}
}

func TestFileStoreCompactionSurvivesSIGKILLAtEachStep(t *testing.T) {
	if os.Getenv(compactCrashEnvPath) != "" {
		compactCrashChild()
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, step := range []string{"written", "synced", "renamed", "done"} {
		t.Run(step, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			acked := runCompactCrashChild(t, path, step)
			if len(acked) < 2 {
				t.Fatalf("only %d acknowledgements before the compaction", len(acked))
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			n := bytes.Count(raw, []byte("\n"))
			_, err = os.Stat(path + compactSuffix)
			if step == "renamed" || step == "done" {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("after the rename, %s%s still exists: %v", path, compactSuffix, err)
				}
				if n > 4 {
					t.Fatalf("after the rename the file has %d lines; want the compacted ones", n)
				}
			} else {
				if err != nil {
					t.Fatalf("before the rename, the compaction's file should be left behind: %v", err)
				}
				if want := 1 + 2*len(acked); n < want {
					t.Fatalf("before the rename the file has %d lines; want every line written, at least %d", n, want)
				}
			}
			s, err := Open(path, WithRetention(compactCrashRetention))
			if err != nil {
				t.Fatalf("reopen after SIGKILL at %q: %v", step, err)
			}
			defer s.Close()
			if _, err := os.Stat(path + compactSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Open left the interrupted compaction's file: %v", err)
			}
			ctx := context.Background()
			keep, err := s.Load(ctx, "keep")
			if err != nil || len(keep) != 1 {
				t.Fatalf("the open session: %d events, %v; want its start", len(keep), err)
			}
			cyc, err := s.Load(ctx, "cyc")
			if err != nil {
				t.Fatal(err)
			}
			// The session's last window is whole and at least the last one
			// acknowledged (one more may have been written before the kill);
			// older ones are forgotten.
			if len(cyc) != 2 || cyc[0].Window != cyc[1].Window || cyc[1].Kind != watchdog.KindStop {
				t.Fatalf("session cyc: %v; want one whole window", cyc)
			}
			last := acked[len(acked)-1]
			if w := cyc[0].Window; w < last || w > last+1 {
				t.Fatalf("session cyc holds window %d; the last acknowledged is %d", w, last)
			}
			// The file reads as a log and the store goes on after it.
			var prev uint64
			raw, err = os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
			var evs []watchdog.Event
			for _, l := range lines {
				e, err := decodeLine(l)
				if err != nil || e.Seq <= prev {
					t.Fatalf("line %q: %v (seq after %d)", l[:min(len(l), 80)], err, prev)
				}
				prev = e.Seq
				evs = append(evs, e)
			}
			if _, err := watchdog.Replay(evs); err != nil {
				t.Fatal(err)
			}
			next := watchdog.Event{ID: "after", AggregateID: "cyc", Kind: watchdog.KindResume, Window: cyc[0].Window + 1}
			if err := s.Append(ctx, next); err != nil {
				t.Fatal(err)
			}
			got, _ := s.Load(ctx, "cyc")
			if got[len(got)-1].Seq <= prev {
				t.Fatalf("seq %d after the file's last %d", got[len(got)-1].Seq, prev)
			}
			t.Logf("killed at %q after %d acknowledged windows: file of %d lines, %d bytes", step, last, len(lines), len(raw))
		})
	}
}

// runCompactCrashChild runs the child until it stops at step, kills it with
// SIGKILL and returns the windows it acknowledged.
func runCompactCrashChild(t *testing.T, path, step string) []int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreCompactionSurvivesSIGKILLAtEachStep$", "-test.count=1") //watchdog:unbounded the test SIGKILLs it
	cmd.Env = append(os.Environ(), compactCrashEnvPath+"="+path, compactCrashEnvStep+"="+step)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []int
	killed := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "ACK open-"); ok {
			w, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			acked = append(acked, w)
		}
		if strings.HasPrefix(line, "ERROR") {
			t.Errorf("child: %s", line)
		}
		if !killed && line == "STEP "+step {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL at %q: %v (killed=%v); stderr:\n%s", step, err, killed, stderr.String())
	}
	return acked
}
