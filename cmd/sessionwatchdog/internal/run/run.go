//go:build unix

package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessionwatchdog/watchdog"
	"github.com/sessionwatchdog/watchdog/internal/proctree"
	"github.com/sessionwatchdog/watchdog/lines"
	"github.com/sessionwatchdog/watchdog/stores/file"
	"github.com/sessionwatchdog/watchdog/stores/postgres"
)

// callRecords is how many completed calls a window records
// (watchdog.WithCallRecords).
const callRecords = 4096

// Main runs "sessionwatchdog run" with args (after "run") and returns its
// exit code (see the Exit constants and Usage). CMD's standard input is
// stdin (passed on as is when it is a file), and its output goes to stdout
// and stderr unchanged; the wrapper's own lines go to stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A reader of the wrapper's own output that went away (run ... 2>&1 |
	// head) is no reason to die: the writes fail, the run goes on and its
	// end is recorded. A caught signal is the default again in the command.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	o, code, ok := parseFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	path, err := lookPath(o.command[0])
	if err != nil {
		diag(stderr, "%v", err)
		if errors.Is(err, errNotExecutable) {
			return ExitNotExecutable
		}
		return ExitNotFound
	}
	r := &runner{o: o, path: path, stdin: stdin, stdout: stdout, stderr: stderr}
	return r.run()
}

var errNotExecutable = errors.New("not executable")

// lookPath finds the command as a shell would, telling a command that is
// not there (127) from one that cannot be run (126): a name without a slash
// that names only a directory or a file without its execute bit on PATH
// cannot be run, as execvp says (EACCES).
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	if errors.Is(err, exec.ErrDot) {
		return p, nil // ./name, found through a relative PATH entry: run it as a shell would
	}
	if strings.Contains(name, "/") {
		if fi, serr := os.Stat(name); serr == nil {
			if fi.IsDir() {
				return "", fmt.Errorf("%s: is a directory: %w", name, errNotExecutable)
			}
			return "", fmt.Errorf("%s: permission denied: %w", name, errNotExecutable)
		}
		return "", fmt.Errorf("%s: no such file", name)
	}
	if name != "" {
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			if dir == "" {
				dir = "."
			}
			if _, serr := os.Stat(filepath.Join(dir, name)); serr == nil {
				return "", fmt.Errorf("%s: permission denied: %w", name, errNotExecutable)
			}
		}
	}
	return "", fmt.Errorf("%s: command not found", name)
}

// runner is one run of the command.
type runner struct {
	o              options
	path           string
	stdin          io.Reader
	stdout, stderr io.Writer

	progress *progress // nil: no progress line

	pgid      atomic.Int64 // the command's process group, once started
	signaled  atomic.Int32 // the first signal the operator sent, 0 if none
	firstAt   time.Time    // when it came (forwardSignals's own)
	forwarded atomic.Bool  // the operator's signal was forwarded to the group
	exitCode  atomic.Int32 // the command's exit status when it ended by itself, -1 before
	finished  atomic.Bool  // stopped after the post-turn grace: done, not exited
}

func (r *runner) say(format string, a ...any) {
	if r.progress != nil {
		r.progress.done()
	}
	diag(r.stderr, format, a...)
}

func (r *runner) run() int {
	ctx := context.Background()
	r.exitCode.Store(-1)
	if r.wantProgress() {
		r.progress = &progress{w: r.stderr}
	}

	store, where, closeStore, err := r.openStore(ctx)
	if err != nil {
		r.say("%v", err)
		return ExitFailed
	}
	defer closeStore()
	opts := []watchdog.Option{
		watchdog.WithStore(store),
		watchdog.WithCallRecords(callRecords),
	}
	if r.o.checkpoints > 0 {
		opts = append(opts, watchdog.WithCheckpoints(r.o.checkpoints))
	}
	w := watchdog.New(opts...)
	closed := false
	closeW := func() error {
		if closed {
			return nil
		}
		closed = true
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return w.Close(cctx)
	}
	defer closeW()

	// Signals: from now on, the operator's stop is forwarded and recorded.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, operatorSignals()...)
	defer signal.Stop(sigs)

	s, how, err := r.open(ctx, w)
	if err != nil {
		r.say("session %q: %v", r.o.session, err)
		return ExitFailed
	}
	r.say("session %s, window %d (%s), recording to %s", s.ID(), s.Window(), how, where)

	stopSignals := make(chan struct{})
	var sigWG sync.WaitGroup
	sigWG.Add(1)
	go func() {
		defer sigWG.Done()
		r.forwardSignals(s, sigs, stopSignals)
	}()
	stopProgress := r.startProgress(s)

	res, runErr := s.Run(func(ctx context.Context) error { return r.supervise(ctx, w, s) })
	last := s.Snapshot()

	stopProgress()
	close(stopSignals)
	sigWG.Wait()
	closeErr := closeW()
	code := r.exitFor(res, runErr)
	r.summary(res, runErr, code, where, last)
	if closeErr != nil {
		r.say("the event log may be incomplete: %v", closeErr)
		return ExitFailed
	}
	return code
}

// wantProgress reports whether to keep a progress line on stderr.
func (r *runner) wantProgress() bool {
	switch r.o.progress {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := r.stderr.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// openStore opens the event store: the file (--log) or PostgreSQL (--dsn).
// where names it for the user (never the DSN, which may hold a password).
func (r *runner) openStore(ctx context.Context) (watchdog.EventStore, string, func(), error) {
	if r.o.dsn != "" {
		pool, err := pgxpool.New(ctx, r.o.dsn)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--dsn: %v", err)
		}
		var opts []postgres.Option
		table := postgres.DefaultTable
		if r.o.table != "" {
			table = r.o.table
			opts = append(opts, postgres.WithTable(table))
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := postgres.New(octx, pool, opts...)
		if err != nil {
			pool.Close()
			return nil, "", nil, fmt.Errorf("--dsn: %v", err)
		}
		return st, "postgres table " + table, func() { _ = st.Close(); pool.Close() }, nil
	}
	st, err := file.Open(r.o.logPath)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--log %s: %v", r.o.logPath, err)
	}
	where := r.o.logPath
	if abs, err := filepath.Abs(where); err == nil {
		where = abs
	}
	return st, where, func() { _ = st.Close() }, nil
}

// open resumes the session if the store knows it, and starts it otherwise.
func (r *runner) open(ctx context.Context, w *watchdog.Watchdog) (*watchdog.Session, string, error) {
	s, err := w.Resume(ctx, r.o.session, r.o.policy)
	if err == nil {
		return s, fmt.Sprintf("resumed: its budget counts from %s", s.Snapshot().WindowStartedAt.Format(time.RFC3339Nano)), nil
	}
	if !errors.Is(err, watchdog.ErrUnknownSession) {
		return nil, "", err
	}
	s, err = w.Start(ctx, r.o.session, time.Now(), r.o.policy)
	return s, "started", err
}

// supervise runs the command in the session's context and waits for it.
func (r *runner) supervise(ctx context.Context, w *watchdog.Watchdog, s *watchdog.Session) error {
	// A resumed window may be past a limit already: let the watchdog
	// decide before anything starts.
	if err := w.Check(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	cmd, err := command(ctx, r.o.grace, r.path, r.o.command)
	if err != nil {
		return err
	}
	cmd.Stdin = r.stdin

	var calls *calls
	stdout := r.progress.writer(r.stdout)
	var evw *eventWriter
	switch {
	case r.o.parser != nil:
		calls = newCalls(ctx, s, r.o.callCap, r.o.subagentCap)
		if r.o.postTurn != watchdog.Off {
			calls.postTurn, calls.finished = r.o.postTurn, func() { r.finishedNoExit(s) }
		}
		evw = &eventWriter{out: stdout, parser: r.o.parser, calls: calls}
		if r.o.stdoutMode == "lines" {
			evw.recent = &recentLines{}
		}
		cmd.Stdout = evw
	case r.o.stdoutMode == "lines":
		cmd.Stdout = lines.Writer(s, watchdog.ChannelStdout, stdout)
	default:
		cmd.Stdout = s.Writer(watchdog.ChannelStdout, stdout)
	}
	stderr := r.progress.writer(r.stderr)
	switch r.o.stderrMode {
	case "none":
		cmd.Stderr = stderr
	default:
		ch, err := s.Channel(stderrChannel)
		if err != nil { // a resumed window under a recorded policy without it
			ch = watchdog.ChannelStdout
		}
		if r.o.stderrMode == "lines" {
			cmd.Stderr = lines.Writer(s, ch, stderr)
		} else {
			cmd.Stderr = s.Writer(ch, stderr)
		}
	}

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.o.command[0], err)
	}
	r.pgid.Store(int64(cmd.Process.Pid))
	r.forward() // the operator's signal may have come while it started
	waitErr := cmd.Wait()
	if evw != nil {
		evw.Flush()
	}
	if calls != nil {
		calls.wait()
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	// The command's status, even when copying its output failed (the
	// wrapper's own stdout or stderr closed: the command gets SIGPIPE as
	// it would without the wrapper, or ends by itself).
	ps := cmd.ProcessState
	switch {
	case ps == nil:
		return waitErr
	case ps.Success():
		r.exitCode.Store(0)
		return nil
	default:
		code := ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = ExitSignalBase + int(ws.Signal())
		}
		r.exitCode.Store(int32(code))
		return fmt.Errorf("%s exited with status %d", r.o.command[0], code)
	}
}

// finishedBy is who the post-turn grace's stop is recorded as.
const finishedBy = "sessionwatchdog run"

// finishedNoExit stops the command that ended its turn and did not exit
// within the post-turn grace: recorded as a stop by finishedBy (reason
// stop_requested) whose why starts "finished_not_exited".
// In shadow mode it stops nothing: it says so on stderr.
func (r *runner) finishedNoExit(s *watchdog.Session) {
	why := fmt.Sprintf("finished_not_exited: the agent's turn ended (its result was recorded) and it did not exit within the post-turn grace (%v)", r.o.postTurn)
	if r.o.policy.Mode == watchdog.ModeShadow {
		r.say("shadow mode, not stopped: %s", why)
		return
	}
	r.finished.Store(true)
	if err := s.StopBy(finishedBy, why); err != nil {
		r.say("recording the post-turn stop: %v", err)
	}
}

// duplicateWindow is how long after the operator's first signal another
// signal counts as a copy of it, not as a second signal. A supervisor that
// signals both the wrapper's pid and its process group (as
// watchdog.Command does) sends two copies well under a millisecond apart,
// and one that forwards a signal and then stops its window (an outer
// sessionwatchdog run: the operator's SIGINT, then SIGTERM from its kill)
// a few milliseconds apart; Go tells no sender, so time tells them apart.
// A person's second Ctrl-C comes a few hundred milliseconds after the
// first at the quickest (a key's auto-repeat starts after 250 ms or more).
const duplicateWindow = 100 * time.Millisecond

// operatorSignals are the signals the wrapper takes as the operator's stop:
// SIGINT, SIGTERM, SIGHUP and SIGQUIT, leaving out SIGINT and SIGHUP when
// the wrapper's caller ignores them (nohup, a background job of a
// non-interactive shell): they stay ignored, for the command too.
func operatorSignals() []os.Signal {
	out := []os.Signal{syscall.SIGTERM, syscall.SIGQUIT}
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// forwardSignals forwards the operator's SIGINT, SIGTERM, SIGHUP or SIGQUIT
// to the command's process group and records the operator's stop; a second
// signal (not one within duplicateWindow of the first) SIGKILLs the whole
// tree at once.
func (r *runner) forwardSignals(s *watchdog.Session, sigs <-chan os.Signal, stop <-chan struct{}) {
	var stopped sync.WaitGroup
	defer stopped.Wait()
	for n := 0; ; {
		var sig os.Signal
		select {
		case <-stop:
			return
		case sig = <-sigs:
		}
		ss, ok := sig.(syscall.Signal)
		if !ok {
			continue
		}
		now := time.Now()
		if n > 0 {
			if now.Sub(r.firstAt) < duplicateWindow {
				continue // a copy of the first
			}
			if pgid := int(r.pgid.Load()); pgid != 0 {
				killTree(pgid)
			}
			r.say("%s %v after the first signal: every process of %s's tree is SIGKILLed", signalName(ss), now.Sub(r.firstAt).Round(time.Millisecond), r.o.command[0])
			continue
		}
		n++
		r.firstAt = now
		r.signaled.Store(int32(ss))
		r.forward()
		why := fmt.Sprintf("%s received by sessionwatchdog run (pid %d): forwarded to the process tree", signalName(ss), os.Getpid())
		// The stop is recorded beside this loop, which goes back at once
		// to the signals: a copy is dated when it comes, not after the
		// record.
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			if err := s.StopBy(r.o.operator, why); err != nil {
				r.say("recording the operator's stop: %v", err)
			}
		}()
	}
}

// killTree SIGKILLs every process of process group pgid and below its
// leader (the guard), the command's descendants in other groups and
// sessions included.
func killTree(pgid int) {
	for _, p := range proctree.Tree(pgid, pgid) {
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// forward sends the operator's signal to the command's process group, once
// both are known: the signal handler and the command's start each store
// theirs, then call it, so that one of them sends it, and only one.
func (r *runner) forward() {
	pgid, sig := r.pgid.Load(), r.signaled.Load()
	if pgid != 0 && sig != 0 && r.forwarded.CompareAndSwap(false, true) {
		_ = syscall.Kill(-int(pgid), syscall.Signal(sig))
	}
}

// signalName is SIGINT, SIGTERM, SIGHUP, SIGQUIT, or the signal's number.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return fmt.Sprintf("signal %d", int(s))
}

// startProgress keeps the progress line up to date every second, until the
// returned func is called.
func (r *runner) startProgress(s *watchdog.Session) (stop func()) {
	if r.progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.progress.show(progressLine(s.Snapshot()))
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		r.progress.done()
	}
}

// exitFor is the wrapper's exit code for the window's result.
func (r *runner) exitFor(res watchdog.Result, runErr error) int {
	switch res.StopReasonCode {
	case watchdog.StopCompleted, watchdog.StopFailed:
		if c := r.exitCode.Load(); c >= 0 {
			return int(c)
		}
		if errors.Is(runErr, errNotExecutable) {
			return ExitNotExecutable
		}
		return ExitFailed // the command could not be started, or was not waited for
	case watchdog.StopRequested:
		if r.finished.Load() && r.signaled.Load() == 0 {
			return ExitFinishedNotExited
		}
		if sig := r.signaled.Load(); sig != 0 {
			return ExitSignalBase + int(sig)
		}
		return ExitRemoteStop // no signal came: a stop request through the store
	case "watchdog_wall_clock_exceeded":
		return ExitWallClock
	case "watchdog_idle_exceeded":
		return ExitIdle
	case "watchdog_session_ceiling_exceeded":
		return ExitCeiling
	}
	var v *watchdog.VerdictError
	if errors.As(runErr, &v) {
		return ExitOtherVerdict
	}
	return ExitFailed
}

// summary writes the one-line summary: why the window ended, how long it
// ran, the exit code, and the channel with the freshest evidence.
func (r *runner) summary(res watchdog.Result, runErr error, code int, where string, last watchdog.Snapshot) {
	why := res.StopReasonCode
	switch {
	case why == watchdog.StopFailed && r.exitCode.Load() >= 0:
		why = fmt.Sprintf("failed (%s exited with status %d)", r.o.command[0], r.exitCode.Load())
	case why == watchdog.StopFailed && runErr != nil:
		why = "failed (" + oneLine(runErr.Error()) + ")"
	case why == watchdog.StopRequested && code == ExitFinishedNotExited:
		why = fmt.Sprintf("finished_not_exited (the turn ended; no exit within the post-turn grace %v)", r.o.postTurn)
	case why == watchdog.StopRequested && r.signaled.Load() == 0:
		why = "stop_requested (a remote stop request: sessionwatchdog inspect shows who asked and why)"
	case why == watchdog.StopRequested:
		why = fmt.Sprintf("stop_requested (%s, by %s)", signalName(syscall.Signal(r.signaled.Load())), r.o.operator)
	}
	fresh := "no channel had evidence"
	if f := freshest(last); len(f) > 0 {
		fresh = fmt.Sprintf("last fresh: %s, %s before the end", f[0].Channel, roundAge(last.At.Sub(*f[0].LastAt)))
	}
	r.say("%s after %s, exit %d; %s; session %s window %d (%s)",
		why, res.Elapsed.Round(time.Millisecond), code, fresh, res.SessionID, res.Window, where)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
