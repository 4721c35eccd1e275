package agentevents

// codex reads OpenAI Codex CLI's headless event stream: the JSON lines
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
type codex struct {
	item bool // "item" is an object
	// the values read, reused from line to line (no allocation a line)
	typ, id, itemType, legacyType, status, server, tool []byte
}

func (c *codex) reset() {
	c.item = false
	for _, b := range []*[]byte{&c.typ, &c.id, &c.itemType, &c.legacyType, &c.status, &c.server, &c.tool} {
		*b = (*b)[:0]
	}
}

func (c *codex) value(s *scanner, v []byte, str, over bool) {
	if !str {
		return
	}
	switch {
	case s.at("type"):
		c.typ = appendText(c.typ[:0], v)
	case s.depth() == 2 && string(s.key(0)) == "item":
		switch string(s.key(1)) {
		case "id":
			c.id = appendText(c.id[:0], v)
		case "type":
			c.itemType = appendText(c.itemType[:0], v)
		case "item_type":
			c.legacyType = appendText(c.legacyType[:0], v)
		case "status":
			c.status = appendText(c.status[:0], v)
		case "server":
			c.server = appendText(c.server[:0], v)
		case "tool":
			c.tool = appendText(c.tool[:0], v)
		}
	}
}

func (c *codex) closed(s *scanner, obj bool) {
	if obj && s.at("item") {
		c.item = true
	}
}

func (c *codex) events(out []Event) []Event {
	switch string(c.typ) {
	case "thread.started", "turn.started", "error", "item.plan.delta", "request_user_input":
		return append(out, Event{Kind: Output})
	case "turn.completed", "turn.failed":
		return append(out, Event{Kind: Output}, Event{Kind: TurnEnd})
	case "item.started", "item.updated", "item.completed":
	default:
		return out
	}
	if !c.item {
		return out
	}
	typ := c.itemType
	if len(typ) == 0 {
		typ = c.legacyType
	}
	var name string
	sub := false
	switch string(typ) {
	case "agent_message", "assistant_message", "reasoning", "plan", "todo_list", "error":
		return append(out, Event{Kind: Output})
	case "command_execution", "web_search", "file_change":
		name = string(typ)
	case "mcp_tool_call":
		name = CleanName("mcp:" + string(c.server) + "/" + string(c.tool))
	case "collab_tool_call":
		name, sub = CleanName("collab:"+string(c.tool)), true
	default:
		return out
	}
	if len(c.id) == 0 {
		return out
	}
	e := Event{ID: string(c.id), Name: name, Subagent: sub}
	switch string(c.typ) {
	case "item.started":
		e.Kind = CallStart
	case "item.updated":
		e.Kind = CallUpdate
	default:
		e.Kind = CallEnd
		if st := string(c.status); st == "failed" || st == "declined" {
			e.Failed, e.Status = true, status(st)
		}
	}
	return append(out, e)
}

func (c *codex) want(s *scanner) bool {
	switch s.depth() {
	case 1:
		return string(s.key(0)) == "type"
	case 2:
		if string(s.key(0)) == "item" {
			switch string(s.key(1)) {
			case "id", "type", "item_type", "status", "server", "tool":
				return true
			}
		}
	}
	return false
}
