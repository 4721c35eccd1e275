// Package run implements "sessionwatchdog run": it starts a command as a
// watched session of the watchdog library, built on its public API only,
// and exits with the command's exit code, or with a code that says why the
// watchdog stopped it. See Usage, and docs/run.md in the repository.
package run

// Exit codes of "sessionwatchdog run" beside the command's own (0 to 255
// when it ends by itself). They sit where few programs put theirs: 124 to
// 127 are timeout(1)'s and the shells', 128+N a death by signal N; 120 to
// 122 are the watchdog's verdicts, 123 an agent done but not exited, 119
// a stop requested from elsewhere (with --dsn).
const (
	// ExitUsage: bad flags or arguments (nothing was started).
	ExitUsage = 2
	// ExitIdle: the idle rule stopped the command (no output, and no
	// fresher evidence on any channel, for the settle window).
	ExitIdle = 120
	// ExitCeiling: the session outran its ceiling (--ceiling), which
	// counts from the session's first start, across windows.
	ExitCeiling = 121
	// ExitOtherVerdict: another verdict of the watchdog stopped it (the
	// children-wait ceiling or a liveness rule of a --policy file).
	ExitOtherVerdict = 122
	// ExitRemoteStop: an operator stopped the session from elsewhere
	// ("sessionwatchdog stop", or postgres.RequestStop; with --dsn only):
	// the stop event names the PostgreSQL role that asked, and why.
	ExitRemoteStop = 119
	// ExitFinishedNotExited: with --events, the agent ended its turn (its
	// result is recorded) and then neither exited nor started anything
	// within --post-turn-grace (default 30s): it was stopped, recorded as
	// a stop_requested by "sessionwatchdog run" whose why starts
	// "finished_not_exited". A real stall still exits ExitIdle.
	ExitFinishedNotExited = 123
	// ExitWallClock: the window outran its wall-clock budget (--wall), as
	// timeout(1) exits when its command times out.
	ExitWallClock = 124
	// ExitFailed: the wrapper itself failed: the event store could not be
	// opened or written, the session could not start or be resumed, the
	// command could not be started for another reason than below.
	ExitFailed = 125
	// ExitNotExecutable: the command was found but cannot be run.
	ExitNotExecutable = 126
	// ExitNotFound: the command was not found.
	ExitNotFound = 127
	// ExitSignalBase: plus N, an operator stop by signal N sent to the
	// wrapper (SIGINT 130, SIGTERM 143, SIGHUP 129), or the command's own
	// death by signal N that the wrapper did not send.
	ExitSignalBase = 128
)

// Usage is the help text of "sessionwatchdog run"; %s is the flag list.
const Usage = `Usage: sessionwatchdog run [flags] [--] CMD [ARGS...]

Runs CMD as a watched session of the watchdog library and exits with its
exit code when it ends by itself. Unlike timeout(1), it does not stop a
busy command at a fixed time only: it also stops one that shows no sign of
work (--idle), and tells a quiet command that works (files changing in its
workspace, a tool call in flight) from a hung one. Every decision is
recorded before it is carried out, in an event log that "sessionwatchdog
inspect" shows and "sessionwatchdog verify" checks.

Evidence of work, each on its channel:
  stdout     every write of CMD's standard output (with --events, every line
             that is the agent's own output: messages, reasoning, results;
             and any line that is not an event of the format, with
             --stdout lines only one that repeats none of the last 8)
  stderr     CMD's standard error, by default only a line that repeats none
             of the last 8 (a heartbeat or a spinner is not work: --stderr)
  workspace  file changes under --workspace DIR, git's included
  mcp_tool   with --events: a tool call, as it starts, progresses and ends
  subagent   with --events: a delegated sub-agent (a background one from its
             start to its notification), and every line it writes
A tool call or sub-agent in flight is bounded work: the idle rule waits for
it, up to its cap (--call-cap, --subagent-cap; the cap is recorded, and the
idle rule applies again after it). A call the agent reports failed is
recorded failed. The end of the agent's turn ends its calls in flight, but
not a background sub-agent's (Claude Code's background tasks): those end at
their notification, their cap, or CMD's end. Nothing extends --wall or
--ceiling. With --events, an agent whose turn ended and that then neither
exits nor starts anything for --post-turn-grace is stopped with exit 123.
Formats: claude (Claude Code stream-json), codex (codex exec --json),
gemini (Gemini CLI stream-json), cursor (cursor-agent stream-json).

The idle rule (--idle): when stdout has been silent for longer than --idle
and no other channel has evidence fresher than --ttl, the observation is
stale; after --settle consecutive stale observations, --settle-interval
apart, the command is stopped.

Stopping: CMD runs in its own process group. On a verdict, the group and
every process below CMD (one that left the group included) get SIGTERM,
then SIGKILL after --grace; the verdict is recorded first. SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to the wrapper are forwarded to the group, recorded
as an operator's stop (who: --operator; why: the signal), then the tree
gets SIGTERM and SIGKILL as above; a second signal, more than 100 ms after
the first, SIGKILLs the whole tree at once (copies within 100 ms count
once). SIGINT and SIGHUP ignored by the wrapper's caller (nohup) stay
ignored, for CMD too. When CMD ends by itself, what it left running in its
tree gets SIGTERM, then SIGKILL after --grace. On Linux, if the wrapper
itself dies (SIGKILL, OOM), a small guard process between it and CMD (the
same executable) sends SIGTERM to the whole tree, even processes that left
the group, and SIGKILL after --grace; see docs/run.md for what is
guaranteed where, and for the differences from timeout(1).

Recording: the session's events go to --log FILE (JSON Lines, the file
store; default sessionwatchdog-SESSION.jsonl in the working directory) or to
PostgreSQL (--dsn). The session id (--session) is printed at the start; run
the same command again with the same --session and log to resume it: an
open window (the wrapper was killed) continues with its original start, so
the budget counts from there; an ended window opens the next, with a fresh
--wall (--ceiling still counts from the session's first start).

At the end a summary line goes to standard error: why it ended, how long
the window ran, and the channel with the freshest evidence. While CMD runs,
a progress line is kept on standard error when it is a terminal.

Exit codes:
  0-255  CMD's own exit code, when it ended by itself (128+N: killed by
         signal N, not by the wrapper)
  2      bad flags or arguments (nothing started)
  119    stopped from elsewhere by "sessionwatchdog stop" (with --dsn)
  120    stopped by the idle rule: no sign of work
  121    stopped at the session ceiling (--ceiling)
  122    stopped by another rule of the policy (children wait, liveness)
  123    with --events: the agent finished its turn but did not exit within
         --post-turn-grace (stopped; recorded as stop_requested by
         "sessionwatchdog run", why "finished_not_exited: ...")
  124    stopped at the wall clock (--wall), as timeout(1)
  125    the wrapper failed (event store, session start, command start)
  126    CMD cannot be executed
  127    CMD not found
  128+N  stopped by the operator with signal N (130 SIGINT, 143 SIGTERM,
         129 SIGHUP, 131 SIGQUIT)

Flags (before CMD; "--" ends them):
%s
Durations are Go durations: 500ms, 30s, 1h30m.

Examples:
  sessionwatchdog run --wall 2h --idle 5m -- make test
  sessionwatchdog run --wall 1h --idle 3m --workspace . --events claude \
      -- claude -p "fix the failing test" --output-format stream-json --verbose
  sessionwatchdog run --idle 5m --workspace . --events codex -- codex exec --json "update the docs"
  sessionwatchdog run --idle 5m --events gemini -- gemini -p "update the docs" --output-format stream-json
  sessionwatchdog run --session nightly-42 --log runs.jsonl --policy policy.json -- ./agent.py
  sessionwatchdog inspect runs.jsonl
`
