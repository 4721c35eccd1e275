// Package agentevents reads the JSON-lines event streams that coding-agent
// CLIs write in headless mode, one line at a time, into the few facts a
// watchdog needs: the agent spoke (output), a tool call or a delegated
// sub-agent began or ended, a line came from inside a sub-agent, a turn
// ended (every call still open ends with it). Anything else, a line that
// is not JSON, not an object or of a type the format does not define, is
// Unknown: the caller passes it through and counts it as output. No input
// makes a parser panic or fail.
//
// Two formats are understood: Claude Code's "stream-json" (claude -p
// --output-format stream-json --verbose) and OpenAI Codex CLI's
// "codex exec --json". Each parser's file names the documentation it
// follows.
package agentevents

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Kind is what a line says happened.
type Kind int

// The kinds of Event.
const (
	// Unknown: the line is not an event of the format (not JSON, not an
	// object, an unknown type, a known type without the fields it needs).
	// It is output all the same.
	Unknown Kind = iota
	// Output: the agent's own output (a message, reasoning, a plan, the
	// session's start or result, an error it reports).
	Output
	// CallStart: a tool call (or, with Subagent, a delegated sub-agent)
	// began. ID identifies it for its CallEnd; Name is the tool's name.
	CallStart
	// CallUpdate: a call in flight reported progress (ID).
	CallUpdate
	// CallEnd: the call ID ended. A CallEnd whose ID never started is a
	// call seen only once it completed (Name says which).
	CallEnd
	// SubagentOutput: a line written from inside the sub-agent that the
	// call ID runs (Claude Code's parent_tool_use_id).
	SubagentOutput
	// TurnEnd: the turn or the run ended: every call still in flight ended
	// with it (a final result, a completed or failed turn).
	TurnEnd
)

// String is the kind's name: unknown, output, call_start, call_update,
// call_end, subagent_output, turn_end.
func (k Kind) String() string {
	switch k {
	case Unknown:
		return "unknown"
	case Output:
		return "output"
	case CallStart:
		return "call_start"
	case CallUpdate:
		return "call_update"
	case CallEnd:
		return "call_end"
	case SubagentOutput:
		return "subagent_output"
	case TurnEnd:
		return "turn_end"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Event is one fact read from a line. A line may hold several (an
// assistant message with two tool calls).
type Event struct {
	Kind Kind
	// ID identifies a call (CallStart, CallUpdate, CallEnd) or the call
	// whose sub-agent wrote the line (SubagentOutput).
	ID string
	// Name is the call's tool name, cleaned (see CleanName): on CallStart,
	// and on a CallEnd when the format repeats it.
	Name string
	// Subagent reports that the call delegates to a sub-agent.
	Subagent bool
	// Failed reports, on a CallEnd, that the call ended with an error.
	Failed bool
}

// Parser reads one format's lines. It keeps no state between lines: the
// caller matches a CallEnd to its CallStart by ID.
type Parser interface {
	// Parse returns the events of one line, without its line ending. It
	// returns at least one event: Unknown when the line is not the
	// format's.
	Parse(line []byte) []Event
}

// Formats are the names New accepts, with the parser's description.
var Formats = map[string]string{
	"claude": "Claude Code: claude -p --output-format stream-json --verbose",
	"codex":  "OpenAI Codex CLI: codex exec --json",
}

// aliases are other names of the formats.
var aliases = map[string]string{
	"claude-code":        "claude",
	"claude-stream-json": "claude",
	"stream-json":        "claude",
	"codex-exec":         "codex",
	"codex-json":         "codex",
}

// Names lists the formats New accepts, sorted.
func Names() []string {
	var out []string
	for n := range Formats {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New returns the parser of the format name (see Formats; a few aliases
// such as "claude-code" and "stream-json" are accepted too).
func New(name string) (Parser, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	switch n {
	case "claude":
		return Claude{}, nil
	case "codex":
		return Codex{}, nil
	}
	return nil, fmt.Errorf("unknown event format %q (want one of: %s)", name, strings.Join(Names(), ", "))
}

// maxName is the longest name CleanName keeps, in bytes.
const maxName = 128

// CleanName makes s fit as a handler's name: valid UTF-8 without NUL or
// control characters, at most 128 bytes, and "tool" when empty.
func CleanName(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > maxName {
		cut := maxName
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	if s == "" {
		return "tool"
	}
	return s
}

var unknown = []Event{{Kind: Unknown}}
var output = []Event{{Kind: Output}}
