package agentevents

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// A Claude Code background sub-agent is a call from its task_started to
// its task_notification (Background, so the parent's result does not end
// it), its progress is task_progress, and the lines and calls of its
// sub-agent name the Agent call that launched it as their parent.
func TestClaudeBackgroundTaskIsACallFromTaskStartedToItsNotification(t *testing.T) {
	got := parseAll(mustNew(t, "claude"), readTranscript(t, "claude-background-task.transcript"))
	want := strings.Join([]string{
		"output",
		"output call_start:toolu_01AG(Agent:general-purpose)[subagent]",
		"call_start:task:task_7c1(task:local_agent)[subagent][background]<toolu_01AG",
		"output call_end:toolu_01AG",
		"subagent_output:toolu_01AG call_start:toolu_02SB(Bash)<toolu_01AG",
		"output",
		"output turn_end",
		"call_update:task:task_7c1",
		"subagent_output:toolu_01AG call_end:toolu_02SB",
		"call_end:task:task_7c1",
		"output",
		"output turn_end",
	}, " | ")
	if got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"type":"system","subtype":"task_notification","task_id":"t1","status":"failed"}`, "call_end:task:t1[failed:failed]"},
		{`{"type":"system","subtype":"task_notification","task_id":"t1","status":"stopped"}`, "call_end:task:t1[failed:stopped]"},
		{`{"type":"system","subtype":"task_started","task_id":"t2","task_type":"local_bash"}`, "call_start:task:t2(task:local_bash)[background]"},
		{`{"type":"system","subtype":"task_started"}`, "unknown"},
	} {
		if got := parseAll(mustNew(t, "claude"), [][]byte{[]byte(tc.line)}); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.line, got, tc.want)
		}
	}
}

// A failed call is reported failed, with what the stream said of it, in
// every format.
func TestAFailedCallIsReportedFailedInEveryFormat(t *testing.T) {
	for _, tc := range []struct{ format, line, want string }{
		{"claude", `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"denied","is_error":true}]}}`, "output call_end:t1[failed:is_error]"},
		{"claude", `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"ok","is_error":false}]}}`, "output call_end:t1"},
		{"codex", `{"type":"item.completed","item":{"id":"i1","type":"command_execution","status":"failed","exit_code":1}}`, "call_end:i1(command_execution)[failed:failed]"},
		{"codex", `{"type":"item.completed","item":{"id":"i2","type":"file_change","status":"declined"}}`, "call_end:i2(file_change)[failed:declined]"},
		{"gemini", `{"type":"tool_result","tool_id":"g1","status":"error","error":{"type":"invalid_tool_params","message":"x"}}`, "call_end:g1[failed:invalid_tool_params]"},
		{"gemini", `{"type":"tool_result","tool_id":"g1","status":"error"}`, "call_end:g1[failed:error]"},
		{"cursor", `{"type":"tool_call","subtype":"completed","call_id":"c1","tool_call":{"shellToolCall":{"args":{},"result":{"rejected":{"reason":"denied"}}}}}`, "call_end:c1(shell)[failed:rejected]"},
		{"cursor", `{"type":"tool_call","subtype":"completed","call_id":"c1","tool_call":{"function":{"name":"lookup","arguments":"{}"}}}`, "call_end:c1(lookup)"},
	} {
		if got := parseAll(mustNew(t, tc.format), [][]byte{[]byte(tc.line)}); got != tc.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.format, tc.line, got, tc.want)
		}
	}
}

// Gemini CLI's stream-json, in its documented shape: tool_use and
// tool_result sharing tool_id are a call, a tool_result with status error
// a failed one, result ends the turn.
func TestGeminiStreamInItsDocumentedShape(t *testing.T) {
	got := parseAll(mustNew(t, "gemini"), readTranscript(t, "gemini-stream-json.transcript"))
	want := strings.Join([]string{
		"output", "output", "output",
		"call_start:run_shell_command-1764388800200-a1(run_shell_command)",
		"call_end:run_shell_command-1764388800200-a1",
		"call_start:read_file-1764388801500-b2(read_file)",
		"call_end:read_file-1764388801500-b2[failed:file_not_found]",
		"output",
		"call_start:replace-1764388801800-c3(replace)",
		"call_end:replace-1764388801800-c3",
		"output",
		"output turn_end",
	}, " | ")
	if got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// Cursor's agent stream-json, in its documented shape: tool_call started
// and completed sharing call_id are a call named after its tool, a result
// other than success a failed one, result ends the turn.
func TestCursorStreamInItsDocumentedShape(t *testing.T) {
	got := parseAll(mustNew(t, "cursor"), readTranscript(t, "cursor-stream-json.transcript"))
	want := strings.Join([]string{
		"output", "output", "output",
		"call_start:toolu_vrtx_01A(shell)",
		"call_end:toolu_vrtx_01A(shell)",
		"call_start:toolu_vrtx_02B(read)",
		"call_end:toolu_vrtx_02B(read)[failed:error]",
		"output",
		"call_start:toolu_vrtx_03C(edit)",
		"call_end:toolu_vrtx_03C(edit)",
		"output",
		"output turn_end",
	}, " | ")
	if got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// A line is parsed the same whole or in pieces cut anywhere, in every
// format: the parser keeps no piece of it.
func TestALineReadsTheSameInPiecesCutAnywhere(t *testing.T) {
	for format, name := range map[string]string{"claude": "claude-stream-json.transcript", "codex": "codex-exec-json.transcript",
		"gemini": "gemini-stream-json.transcript", "cursor": "cursor-stream-json.transcript"} {
		p := mustNew(t, format)
		for _, line := range append(readTranscript(t, name), readTranscript(t, "claude-background-task.transcript")...) {
			whole := fmt.Sprint(p.Parse(line))
			for cut := 0; cut <= len(line); cut++ {
				p.Write(line[:cut])
				p.Write(line[cut:])
				if got := fmt.Sprint(p.End()); got != whole {
					t.Fatalf("%s: cut at %d of %q:\n got %s\nwant %s", format, cut, line, got, whole)
				}
			}
		}
	}
}

// A tool result line of 64 MiB, its ids after its content, ends its call
// when its last piece is read, and the parser's memory stays within
// MemoryBound: it never holds the line.
func TestALineOfAnyLengthEndsItsCallWithBoundedMemory(t *testing.T) {
	p := mustNew(t, "claude")
	chunk := bytes.Repeat([]byte(`0123456789abcdef\"\\\n`), 32<<10/20) // escapes, no quote
	p.Write([]byte(`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"`))
	for n := 0; n < 64<<20; n += len(chunk) {
		p.Write(chunk)
	}
	p.Write([]byte(`","tool_use_id":"toolu_big","is_error":true}]},"parent_tool_use_id":null}`))
	if got, want := fmt.Sprint(p.End()), fmt.Sprint([]Event{{Kind: Output}, {Kind: CallEnd, ID: "toolu_big", Failed: true, Status: "is_error"}}); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	held := cap(p.sc.val) + cap(p.sc.stack)*(maxKey+16)
	if held > MemoryBound {
		t.Errorf("the parser holds %d bytes, more than MemoryBound %d", held, MemoryBound)
	}
}

// Deep nesting past maxDepth makes a line unknown, not a crash.
func TestDeepNestingIsUnknown(t *testing.T) {
	p := mustNew(t, "claude")
	line := `{"type":"result","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	if got := p.Parse([]byte(line)); len(got) != 1 || got[0].Kind != Unknown {
		t.Errorf("got %v, want one Unknown", got)
	}
}

// special finds the first quote or backslash exactly as a byte loop does,
// wherever it is and whatever bytes surround it.
func TestSpecialFindsTheFirstQuoteOrBackslash(t *testing.T) {
	naive := func(p []byte) int {
		for i, c := range p {
			if c == '"' || c == '\\' {
				return i
			}
		}
		return -1
	}
	fill := []byte{0, 1, '!', '#', '[', ']', 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a', 0x21, 0x5b, 0x5d}
	for n := 0; n <= 40; n++ {
		for pos := -1; pos < n; pos++ {
			for _, f := range fill {
				for _, c := range []byte{'"', '\\'} {
					p := bytes.Repeat([]byte{f}, n)
					if pos >= 0 {
						p[pos] = c
						if pos+1 < n {
							p[pos+1] = '"' ^ '\\' ^ c // the other one right after
						}
					}
					if got, want := special(p), naive(p); got != want {
						t.Fatalf("special(%q) = %d, want %d", p, got, want)
					}
				}
			}
		}
	}
}
