package agentevents

import "encoding/json"

// Codex parses OpenAI Codex CLI's headless event stream: the JSON lines
// that `codex exec --json` writes on stdout, as documented in
//
//   - https://developers.openai.com/codex/noninteractive (non-interactive
//     mode: --json turns stdout into a JSON Lines stream of thread, turn,
//     item and error events)
//   - https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs
//     (the event and item types: thread.started, turn.started,
//     turn.completed, turn.failed, item.started, item.updated,
//     item.completed, error; items agent_message, reasoning,
//     command_execution, file_change, mcp_tool_call, collab_tool_call,
//     web_search, todo_list, error)
//
// The mapping:
//
//   - thread.started, turn.started, error, and every item that is the
//     agent's own words (agent_message, reasoning, plan, todo_list, error):
//     Output.
//   - turn.completed and turn.failed: Output, then TurnEnd.
//   - items that are tool calls: item.started starts a call (CallStart, ID
//     the item's id), item.updated is its progress (CallUpdate),
//     item.completed ends it (CallEnd, Failed for status "failed" or
//     "declined"). Their names: "command_execution", "web_search",
//     "file_change" (emitted only once completed: a CallEnd with no
//     start), "mcp:SERVER/TOOL" for mcp_tool_call, and "collab:TOOL" for
//     collab_tool_call, which drives sub-agents (Subagent).
//
// Early versions named the item's type "item_type" and the agent's message
// "assistant_message"; both are read too.
type Codex struct{}

type codexLine struct {
	Type string          `json:"type"`
	Item json.RawMessage `json:"item"`
}

type codexItem struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	ItemType string `json:"item_type"`
	Status   string `json:"status"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
}

// Parse implements Parser.
func (Codex) Parse(line []byte) []Event {
	var l codexLine
	if !decodeObject(line, &l) || l.Type == "" {
		return unknown
	}
	switch l.Type {
	case "thread.started", "turn.started", "error", "item.plan.delta", "request_user_input":
		return output
	case "turn.completed", "turn.failed":
		return []Event{{Kind: Output}, {Kind: TurnEnd}}
	case "item.started", "item.updated", "item.completed":
	default:
		return unknown
	}
	var it codexItem
	if len(l.Item) == 0 || !decodeObject(l.Item, &it) {
		return unknown
	}
	typ := it.Type
	if typ == "" {
		typ = it.ItemType
	}
	var name string
	sub := false
	switch typ {
	case "agent_message", "assistant_message", "reasoning", "plan", "todo_list", "error":
		return output
	case "command_execution", "web_search", "file_change":
		name = typ
	case "mcp_tool_call":
		name = CleanName("mcp:" + it.Server + "/" + it.Tool)
	case "collab_tool_call":
		name, sub = CleanName("collab:"+it.Tool), true
	default:
		return unknown
	}
	if it.ID == "" {
		return unknown
	}
	e := Event{ID: it.ID, Name: name, Subagent: sub}
	switch l.Type {
	case "item.started":
		e.Kind = CallStart
	case "item.updated":
		e.Kind = CallUpdate
	default:
		e.Kind = CallEnd
		e.Failed = it.Status == "failed" || it.Status == "declined"
	}
	return []Event{e}
}
