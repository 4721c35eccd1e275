package agentevents

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessionwatchdog/watchdog/cmd/sessionwatchdog/internal/transcript"
)

// readTranscript returns the payload lines of a testdata transcript: comment
// and blank lines dropped, the pace column ("SECONDS\t") cut.
func readTranscript(t testing.TB, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := transcript.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range lines {
		out = append(out, []byte(l.Text))
	}
	return out
}

// parseAll parses every line and returns the events, each line's events
// joined by " " and the lines by " | ".
func parseAll(p *Parser, lines [][]byte) string {
	var parts []string
	for _, l := range lines {
		var evs []string
		for _, e := range p.Parse(l) {
			s := e.Kind.String()
			if e.ID != "" {
				s += ":" + e.ID
			}
			if e.Name != "" {
				s += "(" + e.Name + ")"
			}
			if e.Subagent {
				s += "[subagent]"
			}
			if e.Failed {
				s += "[failed:" + e.Status + "]"
			}
			if e.Background {
				s += "[background]"
			}
			if e.Parent != "" {
				s += "<" + e.Parent
			}
			evs = append(evs, s)
		}
		parts = append(parts, strings.Join(evs, " "))
	}
	return strings.Join(parts, " | ")
}

// The Claude Code transcript maps as documented on Claude: tool calls with
// their names, the Task tool as a sub-agent whose own lines and tool calls
// are the sub-agent's, the result ending the turn, the two foreign lines
// unknown.
func TestClaudeTranscript(t *testing.T) {
	got := parseAll(mustNew(t, "claude"), readTranscript(t, "claude-stream-json.transcript"))
	want := strings.Join([]string{
		"output",
		"output",
		"output call_start:toolu_01A(Bash)",
		"output call_end:toolu_01A[failed:is_error]",
		"output call_start:toolu_02B(Task:general-purpose)[subagent]",
		"subagent_output:toolu_02B call_start:toolu_03C(Read)<toolu_02B",
		"subagent_output:toolu_02B call_end:toolu_03C",
		"unknown",
		"subagent_output:toolu_02B",
		"output call_end:toolu_02B",
		"unknown",
		"output call_start:toolu_04D(Edit)",
		"output call_end:toolu_04D",
		"output",
		"output turn_end",
	}, " | ")
	if got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// The Codex transcript maps as documented on Codex: command, MCP and
// collab items as calls, file_change as a call seen only when completed,
// the agent's words as output, turn.completed ending the turn.
func TestCodexTranscript(t *testing.T) {
	got := parseAll(mustNew(t, "codex"), readTranscript(t, "codex-exec-json.transcript"))
	want := strings.Join([]string{
		"output",
		"output",
		"output",
		"call_start:item_1(command_execution)",
		"call_update:item_1(command_execution)",
		"call_end:item_1(command_execution)[failed:failed]",
		"call_start:item_2(mcp:github/get_issue)",
		"call_end:item_2(mcp:github/get_issue)",
		"unknown",
		"call_end:item_3(file_change)",
		"call_start:item_4(collab:spawn_agent)[subagent]",
		"call_end:item_4(collab:spawn_agent)[subagent]",
		"unknown",
		"output",
		"output turn_end",
	}, " | ")
	if got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// Lines that are not the format's, or are the format's types without the
// fields they need, are Unknown: never an error, never a panic.
func TestMalformedLinesAreUnknown(t *testing.T) {
	lines := []string{
		``, `{`, `[]`, `"text"`, `null`, `42`, `{}`, `{"type":""}`, `{"type":7}`,
		`{"type":"assistant"}`, `{"type":"assistant","message":"hi"}`, `{"type":"user","message":[1]}`,
		`{"type":"tool_progress"}`, `{"type":"item.started"}`, `{"type":"item.started","item":{"type":"command_execution"}}`,
		`{"type":"item.completed","item":{"id":"x","type":"mystery"}}`, `{"type":"item.updated","item":[]}`,
		"\xff\xfe{\"type\":\"result\"}", `{"type":"result"} trailing`,
	}
	for _, name := range Names() {
		p := mustNew(t, name)
		for _, l := range lines {
			evs := p.Parse([]byte(l))
			if l == "" {
				if len(evs) != 0 {
					t.Errorf("%s: Parse(%q) = %+v, want no event", name, l, evs)
				}
				continue
			}
			if len(evs) != 1 || evs[0].Kind != Unknown {
				t.Errorf("%s: Parse(%q) = %+v, want one Unknown", name, l, evs)
			}
		}
	}
}

// A tool's name becomes a valid handler name whatever the stream says.
func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "tool",
		"  ":                     "tool",
		"Bash":                   "Bash",
		"a\x00b\nc":              "a_b_c",
		"\xffx":                  "\uFFFDx",
		strings.Repeat("é", 100): strings.Repeat("é", 64),
	} {
		if got := CleanName(in); got != want {
			t.Errorf("CleanName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNew(t *testing.T) {
	for name, want := range map[string]string{"claude": "claude", "Claude-Code": "claude", "stream-json": "claude", "codex": "codex", "codex-exec": "codex",
		"gemini": "gemini", "gemini-cli": "gemini", "cursor": "cursor", "cursor-agent": "cursor"} {
		p, err := New(name)
		if err != nil || p.Name() != want {
			t.Errorf("New(%q) = %v, %v; want %s", name, p, err, want)
		}
	}
	if _, err := New("amp"); err == nil || !strings.Contains(err.Error(), "claude, codex, cursor, gemini") {
		t.Errorf("New(amp): %v, want an error listing the formats", err)
	}
}

func mustNew(t testing.TB, name string) *Parser {
	t.Helper()
	p, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzParsers: no line makes a parser panic or return no event, and every
// call event has an ID and a valid name.
func FuzzParsers(f *testing.F) {
	for _, name := range []string{"claude-stream-json.transcript", "codex-exec-json.transcript"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range bytes.Split(b, []byte("\n")) {
			f.Add(l)
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, name := range Names() {
			p := mustNew(t, name)
			evs := p.Parse(line)
			if len(evs) == 0 && len(bytes.TrimSpace(line)) > 0 {
				t.Fatalf("%T: no event for %q", p, line)
			}
			for _, e := range evs {
				switch e.Kind {
				case CallStart, CallUpdate, CallEnd, SubagentOutput:
					if e.ID == "" {
						t.Fatalf("%T: %v without an ID for %q", p, e.Kind, line)
					}
				}
				if e.Name != "" && CleanName(e.Name) != e.Name {
					t.Fatalf("%T: name %q is not clean", p, e.Name)
				}
			}
		}
	})
}
