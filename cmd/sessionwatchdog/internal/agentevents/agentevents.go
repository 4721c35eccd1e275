// Package agentevents reads the JSON-lines event streams that coding-agent
// CLIs write in headless mode, one line at a time, into the few facts a
// watchdog needs: the agent spoke (output), a tool call or a delegated
// sub-agent began or ended, a line came from inside a sub-agent, a turn
// ended (every call still open ends with it). Anything else, a line that
// is not JSON, not an object or of a type the format does not define, is
// Unknown: the caller passes it through and counts it as output. No input
// makes a parser panic or fail.
//
// Four formats are understood: Claude Code's "stream-json" (claude -p
// --output-format stream-json --verbose), OpenAI Codex CLI's "codex exec
// --json", Gemini CLI's "stream-json" (gemini -p --output-format
// stream-json) and Cursor's agent CLI's "stream-json" (cursor-agent -p
// --output-format stream-json). Each format's file names the documentation
// it follows.
//
// A Parser reads a line in pieces of any size (Write, then End) and never
// holds it: its memory is bounded whatever the line's length (see
// MemoryBound), so a tool result of megabytes ends its call as soon as its
// line has been read.
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
	// Status is, on a failed CallEnd, what the stream said of the failure
	// (the call's status, "is_error", an error's type), at most 128 bytes.
	Status string
	// Background reports, on a CallStart, a call that outlives the turn:
	// a TurnEnd does not end it, nor the calls started from inside it
	// (whose Parent is its Parent). Claude Code's background tasks.
	Background bool
	// Parent is, on a CallStart, the call whose sub-agent started it
	// (Claude Code's parent_tool_use_id), or for a Background call, the
	// id by which the lines written from inside it name it.
	Parent string
}

// Parser reads one format's stream, one line at a time, each line in
// pieces: Write its bytes (any number of calls, without the line's
// ending), then End. Its memory is bounded (MemoryBound) whatever the
// line's length. It keeps no state between lines: the caller matches a
// CallEnd to its CallStart by ID. Keys are compared as written (a key
// spelled with escapes matches nothing); values are read with their
// escapes decoded. A Parser is not safe for concurrent
// use; its zero value is not usable (New).
type Parser struct {
	name string
	sc   *scanner
	f    format
	out  []Event
}

// MemoryBound is the most a Parser holds for a line, in bytes, whatever
// the line's length: the open containers (at most 256, each with its key
// up to 48 bytes), the value being read (up to 512 bytes), and the values
// its format keeps, each at most 512 bytes: a few a line, and for Claude
// Code up to 64 tool blocks of 5 values. It is about 180 KiB; a line of
// the real streams takes a few KiB.
const MemoryBound = maxDepth*(maxKey+16) + maxValue + maxBlocks*5*maxValue + 16*maxValue

// format is one format's reading of a line's values.
type format interface {
	sink
	// reset forgets the previous line.
	reset()
	// events appends the events of a line that is one JSON object.
	events(out []Event) []Event
}

// Formats are the names New accepts, with the command that writes each.
var Formats = map[string]string{
	"claude": "Claude Code: claude -p --output-format stream-json --verbose",
	"codex":  "OpenAI Codex CLI: codex exec --json",
	"gemini": "Gemini CLI: gemini -p --output-format stream-json",
	"cursor": "Cursor agent CLI: cursor-agent -p --output-format stream-json",
}

// aliases are other names of the formats.
var aliases = map[string]string{
	"claude-code":        "claude",
	"claude-stream-json": "claude",
	"stream-json":        "claude",
	"codex-exec":         "codex",
	"codex-json":         "codex",
	"gemini-cli":         "gemini",
	"cursor-agent":       "cursor",
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

// New returns a parser of the format name (see Formats; a few aliases
// such as "claude-code" and "stream-json" are accepted too).
func New(name string) (*Parser, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	var f format
	switch n {
	case "claude":
		f = &claude{}
	case "codex":
		f = &codex{}
	case "gemini":
		f = &gemini{}
	case "cursor":
		f = &cursor{}
	default:
		return nil, fmt.Errorf("unknown event format %q (want one of: %s)", name, strings.Join(Names(), ", "))
	}
	p := &Parser{name: n, f: f, sc: newScanner(f)}
	p.f.reset()
	return p, nil
}

// Name is the parser's format (a key of Formats).
func (p *Parser) Name() string { return p.name }

// Write reads the next piece of the current line (without its ending).
func (p *Parser) Write(b []byte) { p.sc.write(b) }

// End ends the current line and returns its events: none for a blank
// line, one Unknown for a line that is not one of the format's events
// (not JSON, not an object, a type the format does not define, a known
// type without the fields it needs). The events are valid until the next
// Write.
func (p *Parser) End() []Event {
	p.sc.end()
	out := p.out[:0]
	switch {
	case p.sc.blank && !p.sc.bad:
	case !p.sc.object():
		out = append(out, Event{Kind: Unknown})
	default:
		out = p.f.events(out)
		if len(out) == 0 {
			out = append(out, Event{Kind: Unknown})
		}
	}
	p.out = out
	p.sc.reset()
	p.f.reset()
	return out
}

// Parse reads line, a whole line without its ending: Write then End.
func (p *Parser) Parse(line []byte) []Event {
	p.Write(line)
	return p.End()
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

// status cleans a failure's description: at most 128 bytes.
func status(s string) string {
	if s == "" {
		return ""
	}
	return CleanName(s)
}
