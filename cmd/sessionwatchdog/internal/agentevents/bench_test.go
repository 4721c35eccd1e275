package agentevents

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkParse reads the stream in the file $AGENTEVENTS_BENCH_FILE
// (JSON lines of the format $AGENTEVENTS_BENCH_FORMAT, default claude)
// line by line, each line in one piece, as run's writer does: its MB/s is
// the parse rate per core. Without the file it reads the testdata
// transcripts of the four formats, repeated to 8 MiB. See BENCHMARKS.md.
func BenchmarkParse(b *testing.B) {
	format := os.Getenv("AGENTEVENTS_BENCH_FORMAT")
	if format == "" {
		format = "claude"
	}
	var data []byte
	if path := os.Getenv("AGENTEVENTS_BENCH_FILE"); path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	} else {
		var one []byte
		for _, name := range []string{"claude-stream-json.transcript", "claude-background-task.transcript", "codex-exec-json.transcript",
			"gemini-stream-json.transcript", "cursor-stream-json.transcript"} {
			for _, l := range readTranscript(b, name) {
				one = append(append(one, l...), '\n')
			}
		}
		data = bytes.Repeat(one, 8<<20/len(one)+1)
	}
	p := mustNew(b, format)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rest := data
		for len(rest) > 0 {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				i = len(rest)
			}
			p.Write(rest[:i])
			p.End()
			rest = rest[min(i+1, len(rest)):]
		}
	}
}
