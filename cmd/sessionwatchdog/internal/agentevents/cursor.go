package agentevents

import "strings"

// cursor reads the headless event stream of Cursor's agent CLI: the JSON
// lines that `cursor-agent -p PROMPT --output-format stream-json` writes
// on stdout, as documented in
//
//   - https://cursor.com/docs/cli/reference/output-format ("stream-json":
//     system init, user and assistant messages shaped as Claude Code's,
//     tool_call events started and completed, a final result)
//   - https://cursor.com/docs/cli/headless (headless use of the same)
//
// The shapes read (the fields named; any other is ignored):
//
//	{"type":"system","subtype":"init","session_id":"…","model":"…"}
//	{"type":"user"|"assistant","message":{"role":"…","content":[{"type":"text","text":"…"}]}}
//	{"type":"thinking","subtype":"delta"|"completed",…}
//	{"type":"tool_call","subtype":"started","call_id":"…","tool_call":{"readToolCall":{"args":{…}}}}
//	{"type":"tool_call","subtype":"completed","call_id":"…","tool_call":{"readToolCall":{"args":{…},"result":{"success":{…}}}}}
//	{"type":"tool_call",…,"tool_call":{"function":{"name":"…","arguments":"…"}}}
//	{"type":"result","subtype":"success","is_error":false,"result":"…"}
//
// The mapping: system, user, assistant and thinking are Output; a
// tool_call "started" starts the call call_id (CallStart), "completed"
// ends it (CallEnd, Failed when its result holds anything but "success",
// Status that key, e.g. "error" or "rejected"); its Name is the key under
// tool_call without its "ToolCall" suffix ("read", "shell", "edit"), or a
// function's name; result is Output, then TurnEnd.
type cursor struct {
	typ, subtype, callID, tool, function, failure string
	ok, message                                   bool
}

func (c *cursor) reset() { *c = cursor{} }

func (c *cursor) value(s *scanner, v []byte, str, over bool) {
	switch s.depth() {
	case 1:
		if !str {
			return
		}
		switch string(s.key(0)) {
		case "type":
			c.typ = text(v)
		case "subtype":
			c.subtype = text(v)
		case "call_id":
			c.callID = text(v)
		}
	case 3:
		if str && s.at("tool_call", "function", "name") {
			c.function = text(v)
		}
	}
	c.result(s)
}

func (c *cursor) closed(s *scanner, obj bool) {
	if obj && s.at("message") {
		c.message = true
	}
	if s.depth() == 2 && obj && string(s.key(0)) == "tool_call" && c.tool == "" {
		c.tool = string(s.key(1))
	}
	c.result(s)
}

// result notes a value that ends under tool_call.X.result.KEY.
func (c *cursor) result(s *scanner) {
	if s.depth() < 4 || string(s.key(0)) != "tool_call" || string(s.key(2)) != "result" {
		return
	}
	switch k := s.key(3); {
	case string(k) == "success":
		c.ok = true
	case c.failure == "":
		c.failure = string(k)
	}
}

func (c *cursor) events(out []Event) []Event {
	switch c.typ {
	case "system", "thinking":
		return append(out, Event{Kind: Output})
	case "user", "assistant":
		if !c.message {
			return out
		}
		return append(out, Event{Kind: Output})
	case "result":
		return append(out, Event{Kind: Output}, Event{Kind: TurnEnd})
	case "tool_call":
	default:
		return out
	}
	if c.callID == "" {
		return out
	}
	name := strings.TrimSuffix(c.tool, "ToolCall")
	if c.function != "" {
		name = c.function
	}
	switch c.subtype {
	case "started":
		return append(out, Event{Kind: CallStart, ID: c.callID, Name: CleanName(name)})
	case "completed":
		e := Event{Kind: CallEnd, ID: c.callID, Name: CleanName(name)}
		if c.failure != "" {
			e.Failed, e.Status = true, status(c.failure)
		}
		return append(out, e)
	}
	return out
}

func (c *cursor) want(s *scanner) bool {
	switch d := s.depth(); {
	case d == 1:
		switch string(s.key(0)) {
		case "type", "subtype", "call_id":
			return true
		}
	case d == 3:
		return s.at("tool_call", "function", "name")
	case d >= 4:
		return string(s.key(0)) == "tool_call" && string(s.key(2)) == "result"
	}
	return false
}
