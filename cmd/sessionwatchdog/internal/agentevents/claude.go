package agentevents

import (
	"bytes"
	"encoding/json"
)

// Claude parses Claude Code's headless event stream: the JSON lines that
// `claude -p --output-format stream-json --verbose` writes on stdout, one
// message a line, as documented in
//
//   - https://docs.claude.com/en/docs/claude-code/headless (headless mode:
//     --output-format stream-json, one JSON message a line, the last one a
//     result)
//   - https://docs.claude.com/en/docs/claude-code/sdk/sdk-typescript
//     (the Agent SDK's message types, which the stream carries:
//     SDKSystemMessage, SDKAssistantMessage and SDKUserMessage with
//     parent_tool_use_id, SDKResultMessage, SDKPartialAssistantMessage
//     "stream_event", SDKToolProgressMessage)
//
// The mapping:
//
//   - "system" (init, compact_boundary, status...), "stream_event",
//     "result", and any other message of the main agent: Output; "result"
//     also ends the turn (TurnEnd).
//   - "assistant": each content block of type "tool_use" starts a call
//     (CallStart, ID the block's id, Name its name); the "Task" tool (also
//     named "Agent" in some versions) delegates to a sub-agent (Subagent,
//     Name "Task:" and its input's subagent_type).
//   - "user": each content block of type "tool_result" ends the call of
//     its tool_use_id (CallEnd, Failed when is_error).
//   - "tool_progress": progress of the call tool_use_id (CallUpdate).
//   - a message with a non-null parent_tool_use_id was written inside the
//     sub-agent that call runs: SubagentOutput instead of Output (its own
//     tool calls start and end as above).
type Claude struct{}

type claudeLine struct {
	Type      string          `json:"type"`
	Message   json.RawMessage `json:"message"`
	Parent    *string         `json:"parent_tool_use_id"`
	ToolUseID string          `json:"tool_use_id"`
}

type claudeMessage struct {
	Content json.RawMessage `json:"content"`
}

type claudeBlock struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   bool            `json:"is_error"`
}

// subagentTools are the names of Claude Code's tool that delegates to a
// sub-agent.
var subagentTools = map[string]bool{"Task": true, "Agent": true}

// Parse implements Parser.
func (Claude) Parse(line []byte) []Event {
	var l claudeLine
	if !decodeObject(line, &l) || l.Type == "" {
		return unknown
	}
	said := Event{Kind: Output}
	if l.Parent != nil && *l.Parent != "" {
		said = Event{Kind: SubagentOutput, ID: *l.Parent}
	}
	switch l.Type {
	case "system", "stream_event", "auth_status", "rate_limit_event":
		return []Event{said}
	case "result":
		return []Event{said, {Kind: TurnEnd}}
	case "tool_progress":
		if l.ToolUseID == "" {
			return unknown
		}
		return []Event{said, {Kind: CallUpdate, ID: l.ToolUseID}}
	case "assistant", "user":
		var m claudeMessage
		if len(l.Message) == 0 || !decodeObject(l.Message, &m) {
			return unknown
		}
		out := []Event{said}
		var blocks []claudeBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			return out // a plain string: text
		}
		for _, b := range blocks {
			switch {
			case l.Type == "assistant" && b.Type == "tool_use" && b.ID != "":
				e := Event{Kind: CallStart, ID: b.ID, Name: CleanName(b.Name)}
				if subagentTools[b.Name] {
					e.Subagent = true
					var in struct {
						Type string `json:"subagent_type"`
					}
					if json.Unmarshal(b.Input, &in) == nil && in.Type != "" {
						e.Name = CleanName(b.Name + ":" + in.Type)
					}
				}
				out = append(out, e)
			case l.Type == "user" && b.Type == "tool_result" && b.ToolUseID != "":
				out = append(out, Event{Kind: CallEnd, ID: b.ToolUseID, Failed: b.IsError})
			}
		}
		return out
	}
	return unknown
}

// decodeObject decodes a JSON object into v, reporting false for anything
// else (not JSON, an array, a string, trailing garbage).
func decodeObject(b []byte, v any) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	return json.Unmarshal(b, v) == nil
}
