package agentevents

import "strings"

// claude reads Claude Code's headless event stream: the JSON lines that
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
//     "stream_event", SDKToolProgressMessage, and the background tasks'
//     system messages task_started, task_progress and task_notification,
//     keyed by task_id with the tool_use_id that launched them, which the
//     SDK's message parser reads)
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
//     its tool_use_id (CallEnd, Failed when is_error is true).
//   - "tool_progress": progress of the call tool_use_id (CallUpdate).
//   - a message with a non-null parent_tool_use_id was written inside the
//     sub-agent that call runs: SubagentOutput instead of Output (its own
//     tool calls start and end as above, with that Parent).
//   - "system" "task_started": a background task (a sub-agent or a shell
//     started in the background, whose Agent or Bash call ended at once
//     with an async_launched result) starts: CallStart, ID "task:" and its
//     task_id, Name "task:" and its task_type (or "task:agent"),
//     Background, Parent its tool_use_id (the parent_tool_use_id of the
//     lines its sub-agent writes). "task_progress": CallUpdate.
//     "task_notification": CallEnd, Failed unless its status is
//     "completed". The "result" that ends the parent's turn does not end
//     it: only its notification, its cap, or the command's end do.
type claude struct {
	// the values read, reused from line to line (no allocation a line)
	typ, subtype, parent, toolUseID, taskID, taskType, status []byte
	message, messageObj                                       bool
	blocks                                                    []claudeBlock
	cur                                                       claudeBlock
}

type claudeBlock struct {
	typ, id, name, toolUseID, subagentType string
	isError                                bool
}

// maxBlocks is how many tool blocks of one message are read; more are
// not the format's (a message holds a few).
const maxBlocks = 64

func (c *claude) reset() {
	for _, b := range []*[]byte{&c.typ, &c.subtype, &c.parent, &c.toolUseID, &c.taskID, &c.taskType, &c.status} {
		*b = (*b)[:0]
	}
	c.message, c.messageObj, c.blocks, c.cur = false, false, c.blocks[:0], claudeBlock{}
}

func (c *claude) value(s *scanner, v []byte, str, over bool) {
	switch s.depth() {
	case 1:
		if !str {
			return
		}
		switch string(s.key(0)) {
		case "type":
			c.typ = appendText(c.typ[:0], v)
		case "subtype":
			c.subtype = appendText(c.subtype[:0], v)
		case "parent_tool_use_id":
			c.parent = appendText(c.parent[:0], v)
		case "tool_use_id":
			c.toolUseID = appendText(c.toolUseID[:0], v)
		case "task_id":
			c.taskID = appendText(c.taskID[:0], v)
		case "task_type":
			c.taskType = appendText(c.taskType[:0], v)
		case "status":
			c.status = appendText(c.status[:0], v)
		}
	case 4:
		if !s.at("message", "content", "[]", string(s.key(3))) {
			return
		}
		b := &c.cur
		switch string(s.key(3)) {
		case "type":
			b.typ = text(v)
		case "id":
			b.id = text(v)
		case "name":
			b.name = text(v)
		case "tool_use_id":
			b.toolUseID = text(v)
		case "is_error":
			b.isError = !str && string(v) == "true"
		}
	case 5:
		if str && s.at("message", "content", "[]", "input", "subagent_type") {
			c.cur.subagentType = text(v)
		}
	}
}

func (c *claude) closed(s *scanner, obj bool) {
	switch s.depth() {
	case 1:
		if s.at("message") {
			c.message, c.messageObj = true, obj
		}
	case 3:
		if obj && s.at("message", "content", "[]") {
			if (c.cur.typ == "tool_use" || c.cur.typ == "tool_result") && len(c.blocks) < maxBlocks {
				c.blocks = append(c.blocks, c.cur)
			}
			c.cur = claudeBlock{}
		}
	}
}

func (c *claude) events(out []Event) []Event {
	said := Event{Kind: Output}
	parent := ""
	if len(c.parent) > 0 {
		parent = string(c.parent)
		said = Event{Kind: SubagentOutput, ID: parent}
	}
	switch string(c.typ) {
	case "":
		return out
	case "system":
		switch string(c.subtype) {
		case "task_started":
			if len(c.taskID) == 0 {
				return out
			}
			name, tt := "task:agent", string(c.taskType)
			if tt != "" {
				name = CleanName("task:" + tt)
			}
			sub := tt == "" || !(contains(tt, "bash") || contains(tt, "shell"))
			return append(out, Event{Kind: CallStart, ID: "task:" + string(c.taskID), Name: name, Subagent: sub, Background: true, Parent: string(c.toolUseID)})
		case "task_progress":
			if len(c.taskID) == 0 {
				return out
			}
			return append(out, Event{Kind: CallUpdate, ID: "task:" + string(c.taskID)})
		case "task_notification":
			if len(c.taskID) == 0 {
				return out
			}
			e := Event{Kind: CallEnd, ID: "task:" + string(c.taskID)}
			if st := string(c.status); st != "completed" {
				e.Failed, e.Status = true, status(st)
				if e.Status == "" {
					e.Status = "no status"
				}
			}
			return append(out, e)
		}
		return append(out, said)
	case "stream_event", "auth_status", "rate_limit_event":
		return append(out, said)
	case "result":
		return append(out, said, Event{Kind: TurnEnd})
	case "tool_progress":
		if len(c.toolUseID) == 0 {
			return out
		}
		return append(out, said, Event{Kind: CallUpdate, ID: string(c.toolUseID)})
	case "assistant", "user":
		if !c.messageObj {
			return out
		}
		out = append(out, said)
		typ := string(c.typ)
		for _, b := range c.blocks {
			switch {
			case typ == "assistant" && b.typ == "tool_use" && b.id != "":
				e := Event{Kind: CallStart, ID: b.id, Name: CleanName(b.name), Parent: parent}
				if subagentTools[b.name] {
					e.Subagent = true
					if b.subagentType != "" {
						e.Name = CleanName(b.name + ":" + b.subagentType)
					}
				}
				out = append(out, e)
			case typ == "user" && b.typ == "tool_result" && b.toolUseID != "":
				e := Event{Kind: CallEnd, ID: b.toolUseID}
				if b.isError {
					e.Failed, e.Status = true, "is_error"
				}
				out = append(out, e)
			}
		}
		return out
	}
	return out
}

// subagentTools are the names of Claude Code's tool that delegates to a
// sub-agent.
var subagentTools = map[string]bool{"Task": true, "Agent": true}

func contains(s, sub string) bool { return strings.Contains(strings.ToLower(s), sub) }

func (c *claude) want(s *scanner) bool {
	switch s.depth() {
	case 1:
		switch string(s.key(0)) {
		case "type", "subtype", "parent_tool_use_id", "tool_use_id", "task_id", "task_type", "status":
			return true
		}
	case 4:
		if string(s.key(0)) == "message" && string(s.key(1)) == "content" {
			switch string(s.key(3)) {
			case "type", "id", "name", "tool_use_id", "is_error":
				return true
			}
		}
	case 5:
		return s.at("message", "content", "[]", "input", "subagent_type")
	}
	return false
}
