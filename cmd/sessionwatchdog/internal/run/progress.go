//go:build unix

package run

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sessionwatchdog/watchdog"
)

// freshest lists the channels of sn with evidence, the freshest first.
func freshest(sn watchdog.Snapshot) []watchdog.EvidenceEntry {
	var out []watchdog.EvidenceEntry
	for _, e := range sn.Evidence {
		if e.LastAt != nil {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastAt.After(*out[j].LastAt) })
	return out
}

// progressLine is the progress line of a session's snapshot: the window's
// elapsed time and budget; the freshest channels, at most three ("stdout
// 0.4s ago, workspace 2.1s ago", or "no evidence yet"); the calls in
// flight; and when the session stops at the earliest if nothing more
// happens, and by which rule.
func progressLine(sn watchdog.Snapshot) string {
	ages := "no evidence yet"
	if f := freshest(sn); len(f) > 0 {
		var parts []string
		for i, c := range f {
			if i == 3 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %s ago", c.Channel, roundAge(sn.At.Sub(*c.LastAt))))
		}
		ages = strings.Join(parts, ", ")
	}
	line := fmt.Sprintf("[sessionwatchdog] %s %s of %s · %s", sn.SessionID,
		roundAge(sn.At.Sub(sn.WindowStartedAt)), roundAge(sn.Deadline.Sub(sn.WindowStartedAt)), ages)
	if sn.CallsInFlight > 0 {
		line += fmt.Sprintf(" · %d call(s) in flight", sn.CallsInFlight)
	}
	if !sn.StopAt.IsZero() {
		line += fmt.Sprintf(" · stops in %s at the earliest (%s)", roundAge(sn.StopAt.Sub(sn.At)), sn.StopRule)
	}
	return line
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
