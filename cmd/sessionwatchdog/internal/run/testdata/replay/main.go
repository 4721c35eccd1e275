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
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
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
	start := time.Now()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	out := bufio.NewWriter(os.Stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if at, rest, ok := strings.Cut(line, "\t"); ok {
			if s, err := strconv.ParseFloat(at, 64); err == nil {
				line = rest
				if d := time.Until(start.Add(time.Duration(s / *speed * float64(time.Second)))); d > 0 {
					time.Sleep(d)
				}
			}
		}
		out.WriteString(line + "\n")
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for *hang {
		time.Sleep(time.Hour) // silent until killed
	}
}
