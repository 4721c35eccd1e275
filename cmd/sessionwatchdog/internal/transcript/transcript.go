// Package transcript reads the agent transcripts of the run command's
// tests (testdata): one line the agent wrote per line, "SECONDS<TAB>LINE"
// where the agent wrote LINE SECONDS after its start, or LINE alone for
// right after the line before; blank lines and lines starting with "#" are
// comments.
package transcript

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Line is one line the agent wrote: Text, At seconds after its start when
// Paced.
type Line struct {
	Text  string
	At    float64
	Paced bool
}

// Read returns r's transcript lines, in order.
func Read(r io.Reader) ([]Line, error) {
	var out []Line
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		l := Line{Text: sc.Text()}
		if l.Text == "" || strings.HasPrefix(l.Text, "#") {
			continue
		}
		if at, rest, ok := strings.Cut(l.Text, "\t"); ok {
			if s, err := strconv.ParseFloat(at, 64); err == nil {
				l = Line{Text: rest, At: s, Paced: true}
			}
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
