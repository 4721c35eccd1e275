package agentevents

// gemini reads Gemini CLI's headless event stream: the JSON lines that
// `gemini -p PROMPT --output-format stream-json` writes on stdout, as
// documented in
//
//   - https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md
//     ("Streaming JSON output": one JSON event a line, of the types init,
//     message, tool_use, tool_result, error and result)
//   - https://geminicli.com/docs/cli/headless/ (the same page, published)
//
// The shapes read (the fields named; any other is ignored):
//
//	{"type":"init","session_id":"…","model":"…"}
//	{"type":"message","role":"user"|"assistant","content":"…","delta":true}
//	{"type":"tool_use","tool_name":"run_shell_command","tool_id":"…","parameters":{…}}
//	{"type":"tool_result","tool_id":"…","status":"success"|"error","output":"…","error":{"type":"…","message":"…"}}
//	{"type":"error","severity":"warning"|"error","message":"…"}
//	{"type":"result","status":"success"|"error","stats":{…}}
//
// The mapping: init, message and error are Output; tool_use starts the
// call tool_id (CallStart, Name tool_name); tool_result ends it (CallEnd,
// Failed unless its status is "success", Status the error's type or the
// status); result is Output, then TurnEnd.
type gemini struct {
	typ, toolID, toolName, status, errType string
}

func (g *gemini) reset() { *g = gemini{} }

func (g *gemini) value(s *scanner, v []byte, str, over bool) {
	if !str {
		return
	}
	switch {
	case s.depth() == 1:
		switch string(s.key(0)) {
		case "type":
			g.typ = text(v)
		case "tool_id":
			g.toolID = text(v)
		case "tool_name":
			g.toolName = text(v)
		case "status":
			g.status = text(v)
		}
	case s.at("error", "type"):
		g.errType = text(v)
	}
}

func (g *gemini) closed(*scanner, bool) {}

func (g *gemini) events(out []Event) []Event {
	switch g.typ {
	case "init", "message", "error":
		return append(out, Event{Kind: Output})
	case "result":
		return append(out, Event{Kind: Output}, Event{Kind: TurnEnd})
	case "tool_use":
		if g.toolID == "" {
			return out
		}
		return append(out, Event{Kind: CallStart, ID: g.toolID, Name: CleanName(g.toolName)})
	case "tool_result":
		if g.toolID == "" {
			return out
		}
		e := Event{Kind: CallEnd, ID: g.toolID}
		if g.status != "success" {
			e.Failed, e.Status = true, status(g.errType)
			if e.Status == "" {
				e.Status = status(g.status)
			}
			if e.Status == "" {
				e.Status = "no status"
			}
		}
		return append(out, e)
	}
	return out
}

func (g *gemini) want(s *scanner) bool {
	switch s.depth() {
	case 1:
		switch string(s.key(0)) {
		case "type", "tool_id", "tool_name", "status":
			return true
		}
	case 2:
		return s.at("error", "type")
	}
	return false
}
