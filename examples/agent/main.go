//go:build unix

// Command agent is an orchestrator that supervises a real subprocess, its
// "agent", under a watchdog session, the way a host for AI coding agents
// would:
//
//   - the agent runs through watchdog.Command, in its own process group, so
//     the watchdog's cancel kills it and every child it started;
//   - its stdout goes through s.Writer(watchdog.ChannelStdout, ...): every
//     write is evidence on the baseline channel; its stderr has a channel
//     of its own, "stderr" (declared in the policy), so the log tells
//     talk from complaints, and goes through lines.Writer: a line that
//     repeats one of the last few (a wedged agent's heartbeat) is not
//     evidence;
//   - its workspace (a temporary directory) is declared in the policy
//     (Policy.WorkspaceRoot), so Start watches it and the start record says
//     so: every file change is evidence on the workspace channel;
//   - the log records each completed tool call (WithCallRecords) and the
//     session's evidence every 250 ms (WithCheckpoints), for the inspector
//     and for a policy what-if;
//   - it asks the orchestrator for tool calls (a line "TOOL name arg" on its
//     stdout, answered on its stdin); each one runs under its own deadline
//     with watchdog.Call, which records the call itself (evidence on the
//     mcp_tool channel as it starts and as it ends, bounded work while it
//     runs, its end with WithCallRecords), and marks its steps with
//     watchdog.Step.
//
// The agent plays a fixed script, in a few seconds of real time:
//
//  1. it talks and makes a quick tool call (read_file);
//  2. it makes a slow tool call (web_search, 1.3 s with stdout silent): the
//     idle rule waits for the in-flight handler (CONTINUE, active_channel
//     handler);
//  3. it makes a tool call that hangs (fetch_url): its 400 ms deadline
//     fires, recorded as runtime.handler.deadline_exceeded with dying_span
//     "http_get", and the agent gets an error back;
//  4. it does two seconds of quiet file work, no output at all: the idle
//     rule defers on the fresh file changes (CONTINUE, active_channel
//     workspace);
//  5. it starts a helper process and hangs silently, ignoring SIGTERM: the
//     idle rule finds no fresh evidence and stops the session (HARD_STOP,
//     idle_exceeded), and watchdog.Command kills the whole process
//     group, the helper included (SIGTERM, then SIGKILL after the grace).
//
// At the end it prints the verdicts that were recorded and exits non-zero
// if the story did not happen as told, so CI catches a regression.
//
// Run it with: go run ./examples/agent
//
// With -log FILE it also writes the event log to FILE (JSON Lines, the file
// store), to read with the inspector: sessionwatchdog inspect FILE.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/lines"
	"github.com/sessionwatchdog/watchdog/stores/file"
)

// The agent's process re-executes this program with roleEnv set.
const (
	roleEnv      = "WATCHDOG_EXAMPLE_AGENT_ROLE" // "agent" or "helper"
	workspaceEnv = "WATCHDOG_EXAMPLE_AGENT_WORKSPACE"
)

// policy uses short real durations so the whole story takes a few seconds.
var policy = watchdog.Policy{
	WallClock:      30 * time.Second,       // a safety net; the idle rule ends the story
	IdleWindow:     time.Second,            // stdout silent for more than 1 s is stale...
	EvidenceTTL:    500 * time.Millisecond, // ...unless another channel has evidence at most 500 ms old
	SettleChecks:   1,                      // act on the first stale observation
	SettleInterval: 100 * time.Millisecond,
	HandlerGrace:   300 * time.Millisecond,
	Channels:       []string{stderrChannel},
}

// stderrChannel is the agent's stderr: evidence of its own, beside stdout.
const stderrChannel = "stderr"

// killGrace is how long the agent's process group has between SIGTERM and
// SIGKILL.
const killGrace = 300 * time.Millisecond

func main() {
	switch os.Getenv(roleEnv) {
	case "agent":
		os.Exit(agent())
	case "helper":
		time.Sleep(time.Minute) // a child of the agent that would outlive it
		os.Exit(0)
	}
	logPath := flag.String("log", "", "also write the event log to this new JSON Lines `file` (for sessionwatchdog inspect)")
	flag.Parse()
	if err := orchestrate(context.Background(), os.Stdout, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "agent example:", err)
		os.Exit(1)
	}
}

// orchestrate runs the agent under a watchdog session, prints what was
// recorded, and checks that the story happened.
func orchestrate(ctx context.Context, out io.Writer, logPath string) error {
	workspace, err := os.MkdirTemp("", "watchdog-agent-workspace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workspace)
	self, err := os.Executable()
	if err != nil {
		return err
	}

	w, closeLog, err := newWatchdog(logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	defer w.Close(ctx) // on an early return; Close is idempotent
	p := policy
	p.WorkspaceRoot = workspace // watched from Start, and recorded
	s, err := w.Start(ctx, "agent-1", time.Now(), p)
	if err != nil {
		return err
	}

	stderrCh, err := s.Channel(stderrChannel)
	if err != nil {
		return err
	}
	var helperPID int
	res, runErr := s.Run(func(ctx context.Context) error {
		cmd := watchdog.Command(ctx, killGrace, self)
		cmd.Env = append(os.Environ(), roleEnv+"=agent", workspaceEnv+"="+workspace)
		pr, pw := io.Pipe()
		// Every write on the agent's stdout is evidence on the baseline
		// channel, and feeds the tool-call protocol; its stderr is
		// evidence on a channel of its own, where a repeated line is not.
		cmd.Stdout = s.Writer(watchdog.ChannelStdout, pw)
		cmd.Stderr = lines.Writer(s, stderrCh, os.Stderr)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Fprintf(out, "orchestrator: agent started, pid %d, workspace %s\n", cmd.Process.Pid, workspace)
		protocol := make(chan struct{})
		go func() {
			defer close(protocol)
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				line := sc.Text()
				fmt.Fprintf(out, "  agent> %s\n", line)
				if pid, ok := strings.CutPrefix(line, "helper pid "); ok {
					helperPID, _ = strconv.Atoi(pid)
				}
				if req, ok := strings.CutPrefix(line, "TOOL "); ok {
					name, arg, _ := strings.Cut(req, " ")
					fmt.Fprintln(stdin, toolCall(ctx, out, name, arg))
				}
			}
			_, _ = io.Copy(io.Discard, pr)
		}()
		waitErr := cmd.Wait()
		pw.Close()
		<-protocol
		fmt.Fprintf(out, "orchestrator: agent exited: %v\n", waitErr)
		if err := context.Cause(ctx); err != nil {
			return err // the watchdog stopped the session
		}
		return waitErr
	})
	fmt.Fprintf(out, "orchestrator: session ended: %v\n", runErr)
	if err := w.Close(ctx); err != nil {
		return err
	}
	env, _ := json.Marshal(res)
	fmt.Fprintf(out, "result envelope: %s\n", env)
	events, err := w.Store().Load(ctx, "agent-1")
	if err != nil {
		return err
	}
	printEvents(out, events)
	return check(out, res, events, helperPID)
}

// newWatchdog returns a Watchdog on the in-memory store, or, when logPath
// is not empty, on a new file store at logPath: a JSON Lines event log that
// the inspector reads (sessionwatchdog inspect FILE). The returned func closes the
// file store; call it after the Watchdog's Close.
func newWatchdog(logPath string) (*watchdog.Watchdog, func(), error) {
	opts := []watchdog.Option{watchdog.WithCallRecords(16), watchdog.WithCheckpoints(250 * time.Millisecond)}
	if logPath == "" {
		return watchdog.New(opts...), func() {}, nil
	}
	if _, err := os.Stat(logPath); err == nil {
		return nil, nil, fmt.Errorf("event log %s already exists: give a new path (the example's session ids are fixed)", logPath)
	}
	store, err := file.Open(logPath)
	if err != nil {
		return nil, nil, err
	}
	return watchdog.New(append(opts, watchdog.WithStore(store))...), func() { _ = store.Close() }, nil
}

// tools are the orchestrator's tools; each honours its context.
var tools = map[string]func(ctx context.Context, arg string) (string, error){
	"read_file": func(ctx context.Context, arg string) (string, error) {
		defer watchdog.Step(ctx, "open")()
		return "contents of " + arg, nil
	},
	"web_search": func(ctx context.Context, arg string) (string, error) {
		defer watchdog.Step(ctx, "query_index")()
		return "3 results for " + arg, sleep(ctx, 1300*time.Millisecond)
	},
	"fetch_url": func(ctx context.Context, arg string) (string, error) {
		defer watchdog.Step(ctx, "resolve")()
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return "", err
		}
		defer watchdog.Step(ctx, "http_get")()
		return "", sleep(ctx, time.Minute) // a server that never answers
	},
}

// budgets are the tool calls' deadlines.
var budgets = map[string]time.Duration{
	"read_file":  500 * time.Millisecond,
	"web_search": 2 * time.Second,
	"fetch_url":  400 * time.Millisecond,
}

// toolCall runs one tool call under its deadline and returns the line to
// send back to the agent. The call is a handle: it records itself, its
// begin and its end are evidence on the mcp_tool channel (the end before
// the idle rule looks again, so a call that just finished is fresh
// evidence), and while it is in flight the idle rule waits for it. Nothing
// is touched around it.
func toolCall(ctx context.Context, out io.Writer, name, arg string) string {
	tool, ok := tools[name]
	if !ok {
		return "ERROR unknown tool " + name
	}
	start := time.Now()
	call, err := watchdog.Begin(ctx, "tool:"+name, watchdog.CallLimits{Cap: budgets[name]})
	if err != nil {
		return "ERROR " + err.Error()
	}
	result, err := tool(call.Context(), arg) // the tools honour their context
	err = call.End(err)                      // the deadline's error if the cap came first
	took := time.Since(start).Round(10 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(out, "orchestrator: tool %s failed after %v: %v\n", name, took, err)
		return "ERROR " + err.Error()
	}
	fmt.Fprintf(out, "orchestrator: tool %s answered after %v\n", name, took)
	return "RESULT " + result
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// printEvents prints every recorded event, one line each, and the evidence
// summary of each verdict.
func printEvents(out io.Writer, events []watchdog.Event) {
	fmt.Fprintln(out, "\nrecorded events:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  +s\tkind\tverdict\trule\tactive_channel\treason\tdetail")
	for _, e := range events {
		detail := ""
		switch {
		case e.Handler != "":
			detail = fmt.Sprintf("handler %s, dying_span %s, %.2fs of %.2fs", e.Handler, e.DyingSpan, e.MeasureSeconds, e.LimitSeconds)
		case e.Rule == "idle":
			detail = fmt.Sprintf("stdout silent %.2fs of %.2fs", e.MeasureSeconds, e.LimitSeconds)
		}
		fmt.Fprintf(tw, "  %.2f\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ElapsedSeconds, strings.TrimPrefix(e.Kind, "runtime."),
			verdict(e), e.Rule, e.ActiveChannel, e.Reason, detail)
	}
	_ = tw.Flush()
}

// verdict is the log's verdict label of e: CONTINUE on a verdict the
// session outlives, HARD_STOP on a decision or a cancel.
func verdict(e watchdog.Event) string {
	switch e.Kind {
	case watchdog.KindVerdict:
		return "CONTINUE"
	case watchdog.KindDecision, watchdog.KindCancel:
		return "HARD_STOP"
	}
	return ""
}

// check returns an error unless the story happened: a CONTINUE on the
// in-flight handler, the tool deadline with its dying span, a CONTINUE on
// the workspace, then the idle HARD_STOP that killed the agent's process
// group.
func check(out io.Writer, res watchdog.Result, events []watchdog.Event, helperPID int) error {
	var problems []string
	want := func(ok bool, what string) {
		if !ok {
			problems = append(problems, what)
		}
	}
	has := func(match func(e watchdog.Event) bool) bool {
		for _, e := range events {
			if match(e) {
				return true
			}
		}
		return false
	}
	want(res.StopReasonCode == "watchdog_idle_exceeded" && res.Resumable,
		fmt.Sprintf("result %q, want %q (resumable)", res.StopReasonCode, "watchdog_idle_exceeded"))
	want(has(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindVerdict && e.ActiveChannel == "handler"
	}), "no CONTINUE verdict with active_channel handler (the slow tool call)")
	want(has(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindHandlerDeadline && e.Handler == "tool:fetch_url" && e.DyingSpan == "http_get"
	}), "no handler deadline event for tool:fetch_url with dying_span http_get")
	want(has(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindVerdict && e.ActiveChannel == "workspace"
	}), "no CONTINUE verdict with active_channel workspace (the quiet file work)")
	want(has(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindDecision && e.Rule == "idle" && e.Mode == watchdog.ModeAct
	}), "no HARD_STOP decision of the idle rule")
	want(has(func(e watchdog.Event) bool {
		return e.Kind == watchdog.KindCancel && e.Reason == "idle_exceeded"
	}), "no cancel event with reason idle_exceeded")
	if helperPID == 0 {
		problems = append(problems, "the agent never reported its helper's pid")
	} else if alive(helperPID) {
		problems = append(problems, fmt.Sprintf("the agent's helper (pid %d) survived the kill", helperPID))
		_ = syscall.Kill(helperPID, syscall.SIGKILL)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the story did not happen as expected:\n  - %s", strings.Join(problems, "\n  - "))
	}
	fmt.Fprintf(out, "\nOK: the slow tool call and the quiet file work were waited for; the silent hang was cut and the agent's process group (helper pid %d included) was killed.\n", helperPID)
	return nil
}

// alive reports whether pid is a live process: not gone, and not a zombie
// waiting for its new parent to reap it.
func alive(pid int) bool {
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err == nil {
		// "pid (comm) S ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			return b[i+2] != 'Z' && b[i+2] != 'X'
		}
		return true
	} else if errors.Is(err, os.ErrNotExist) {
		if _, statErr := os.Stat("/proc/self"); statErr == nil {
			return false // procfs is there and the process is not
		}
	}
	return syscall.Kill(pid, 0) == nil
}

// agent is the subprocess: a scripted stand-in for an AI agent.
func agent() int {
	// Ignore SIGTERM, as a wedged agent might: the orchestrator's kill has
	// to escalate to SIGKILL. The helper inherits the disposition.
	signal.Ignore(syscall.SIGTERM)
	ws := os.Getenv(workspaceEnv)
	in := bufio.NewScanner(os.Stdin)
	tool := func(name, arg string) string {
		fmt.Printf("TOOL %s %s\n", name, arg)
		if !in.Scan() {
			os.Exit(3)
		}
		return in.Text()
	}

	fmt.Println("planning: read the task, look things up, write the code")
	fmt.Println("got:", tool("read_file", "TASK.md"))
	fmt.Println("got:", tool("web_search", "fsnotify recursive watch"))
	fmt.Println("got:", tool("fetch_url", "https://example.invalid/slow"))

	// Quiet file work: two seconds of edits, nothing printed.
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := 0; i < 14; i++ {
		name := filepath.Join(ws, "src", fmt.Sprintf("file%02d.go", i%4))
		if err := os.WriteFile(name, []byte(fmt.Sprintf("package src // edit %d\n", i)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		time.Sleep(150 * time.Millisecond)
	}
	fmt.Println("files written; starting a helper")

	self, _ := os.Executable()
	env := []string{roleEnv + "=helper"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, roleEnv+"=") {
			env = append(env, kv)
		}
	}
	helper := syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}}
	pid, err := syscall.ForkExec(self, []string{self}, &helper)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("helper pid %d\n", pid)
	time.Sleep(time.Minute) // the silent hang: no output, no file changes
	return 0
}
