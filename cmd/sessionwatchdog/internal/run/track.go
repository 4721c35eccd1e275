//go:build unix

package run

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// tracker keeps, for the progress line and the summary, when each channel
// last had evidence: from the touches the wrapper makes, and from the
// evidence summaries the Watchdog records (checkpoints, verdicts), which
// also cover what the library records by itself (the workspace, lines of
// stderr).
type tracker struct {
	names    []string       // channel names by watchdog.Channel
	last     []atomic.Int64 // unix nanoseconds, by channel; 0: never
	inFlight atomic.Int64   // calls in flight

	mu       sync.Mutex
	recorded map[string]time.Time // the latest instant recorded per channel
}

func newTracker(channels []string) *tracker {
	names := append([]string{"stdout", "mcp_tool", "subagent", "workspace"}, channels...)
	return &tracker{names: names, last: make([]atomic.Int64, len(names)), recorded: map[string]time.Time{}}
}

// touch records evidence on ch of s, and notes it.
func (t *tracker) touch(s *watchdog.Session, ch watchdog.Channel) {
	s.Touch(ch)
	t.touched(ch)
}

// touched notes evidence on ch recorded by someone else (a Call, a Writer).
func (t *tracker) touched(ch watchdog.Channel) {
	if i := int(ch); i >= 0 && i < len(t.last) {
		t.last[i].Store(time.Now().UnixNano())
	}
}

// callStarted notes a call's begin: evidence on its channel ch.
func (t *tracker) callStarted(ch watchdog.Channel) {
	t.inFlight.Add(1)
	t.touched(ch)
}

// callEnded notes a call's end; evidence on ch unless the session had
// ended (End records it all the same, but the window is over).
func (t *tracker) callEnded(ch watchdog.Channel, evidence bool) {
	t.inFlight.Add(-1)
	if evidence {
		t.touched(ch)
	}
}

// observe reads the evidence summary of a recorded event (Observer.OnEvent).
func (t *tracker) observe(e watchdog.Event) {
	if len(e.EvidenceSummary) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, en := range e.EvidenceSummary {
		if en.LastAt != nil && en.LastAt.After(t.recorded[en.Channel]) {
			t.recorded[en.Channel] = *en.LastAt
		}
	}
}

// channelAge is a channel's latest evidence.
type channelAge struct {
	name string
	at   time.Time
}

// freshest lists the channels with evidence, the freshest first.
func (t *tracker) freshest() []channelAge {
	t.mu.Lock()
	at := make(map[string]time.Time, len(t.recorded))
	for n, ts := range t.recorded {
		at[n] = ts
	}
	t.mu.Unlock()
	for i, n := range t.names {
		if ns := t.last[i].Load(); ns != 0 {
			if ts := time.Unix(0, ns); ts.After(at[n]) {
				at[n] = ts
			}
		}
	}
	out := make([]channelAge, 0, len(at))
	for n, ts := range at {
		out = append(out, channelAge{n, ts})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].at.Equal(out[j].at) {
			return out[i].at.After(out[j].at)
		}
		return out[i].name < out[j].name
	})
	return out
}

// ages is "stdout 0.4s ago, workspace 2.1s ago" at now: at most three
// channels, the freshest first; "no evidence yet" if none.
func (t *tracker) ages(now time.Time) string {
	f := t.freshest()
	if len(f) == 0 {
		return "no evidence yet"
	}
	var parts []string
	for i, c := range f {
		if i == 3 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s ago", c.name, roundAge(now.Sub(c.at))))
	}
	return strings.Join(parts, ", ")
}

// roundAge rounds d for a person: 0.4s, 12s, 3m10s.
func roundAge(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// progress keeps one line on a terminal up to date: the window's elapsed
// time and budget, the freshest channels, the calls in flight. The
// command's output, written through its writer, clears the line first.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // the terminal
	shown bool
}

// clear erases the progress line if it is shown; call it with p.mu held.
func (p *progress) clearLocked() {
	if p.shown {
		_, _ = io.WriteString(p.w, "\r\033[K")
		p.shown = false
	}
}

// show draws line.
func (p *progress) show(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.w, "\r\033[K"+line)
	p.shown = true
}

// done erases the line for good.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

// writer returns a writer to out that erases the progress line first.
func (p *progress) writer(out io.Writer) io.Writer {
	if p == nil {
		return out
	}
	return progressWriter{p, out}
}

type progressWriter struct {
	p   *progress
	out io.Writer
}

func (w progressWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.p.clearLocked()
	return w.out.Write(b)
}
