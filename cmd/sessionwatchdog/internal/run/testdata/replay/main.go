// Command replay writes a transcript's lines on stdout at the pace it
// recorded, as the agent that wrote them did: the stand-in for a coding
// agent in the tests of "sessionwatchdog run".
//
//	replay [-speed F] [-hang] FILE
//
// A transcript line is "SECONDS<TAB>LINE": LINE is written SECONDS after
// the start (divided by -speed). A line without that column is written
// right after the one before it; blank lines and lines starting with "#"
// are skipped. With -hang, replay blocks after the last line, silent, until
// it is killed: an agent that wedged.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/transcript"
)

func main() {
	speed := flag.Float64("speed", 1, "replay this many times faster than recorded")
	hang := flag.Bool("hang", false, "after the last line, block silently until killed")
	flag.Parse()
	if flag.NArg() != 1 || *speed <= 0 {
		fmt.Fprintln(os.Stderr, "usage: replay [-speed F] [-hang] FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lines, err := transcript.Read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Now()
	for _, l := range lines {
		if d := time.Until(start.Add(time.Duration(l.At / *speed * float64(time.Second)))); l.Paced && d > 0 {
			time.Sleep(d)
		}
		if _, err := os.Stdout.WriteString(l.Text + "\n"); err != nil {
			os.Exit(1)
		}
	}
	for *hang {
		time.Sleep(time.Hour) // silent until killed
	}
}
