package watchdog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sessionwatchdog/watchdog/internal/workspace"
)

// defaultWorkspaceIgnore are the patterns WatchWorkspace ignores when it is
// given none.
var defaultWorkspaceIgnore = []string{".git"}

// WatchWorkspace records ChannelWorkspace evidence for every file change under
// root: recursively, new directories included, with ignore patterns matched
// against each element of a path relative to root (filepath.Match syntax, a
// trailing slash allowed, for example ".git/" or "*.tmp"; none given means
// ".git"). It needs no UI and stops when the session's window
// ends. The Watchdog shares one fsnotify watcher among all sessions.
// Declare the workspace in the Policy (Policy.WorkspaceRoot) instead to have
// Start watch it and record it: a session then never runs without it.
//
// Git work counts: with ".git" ignored (the default), every
// repository in the workspace (root's, a nested one, one that git init or
// git clone creates during the session) still has its top level, its
// objects/ and each directory in objects/ (the fan-out directories of
// loose objects, pack/) watched, without refs/ and logs/. So a commit, add,
// checkout, rebase, merge, reset or fetch counts by the files it writes at
// the top (index.lock, COMMIT_EDITMSG, HEAD, ORIG_HEAD, FETCH_HEAD), and a
// long step that writes only objects (a first add of many files, a clone,
// a fetch, a gc) by each object and pack file it writes; a fetch's
// thousands of refs are no event each. A .git file (a worktree, a
// submodule) is not followed.
//
// It returns an error wrapping ErrInvalidArgument for an empty root, a root
// that is not a directory, a bad pattern, or a call inside a
// testing/synctest bubble (whose time the watcher would stop: see
// docs/testing.md); the window's end cause if the
// window has ended; ErrClosed after Close.
func (s *Session) WatchWorkspace(root string, ignore ...string) error {
	if root == "" {
		return fmt.Errorf("%w: session %q: empty workspace path", ErrInvalidArgument, s.id)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("%w: workspace %q: %v", ErrInvalidArgument, root, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: workspace %q is not a directory", ErrInvalidArgument, root)
	}
	pats, err := ignorePatterns(ignore)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	w := s.w
	m, hook, err := w.workspaceMonitor()
	if err != nil {
		return err
	}

	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if s.state.Load() >= stateStopped {
		cause := s.endCauseLocked()
		w.mu.Unlock()
		return cause
	}
	w.wg.Add(1) // the AfterFunc below; Close waits for it
	w.mu.Unlock()

	stop, err := m.Watch(abs, pats, func(path string) {
		s.Touch(ChannelWorkspace)
		if hook != nil {
			hook(s, path)
		}
	})
	if err != nil {
		w.wg.Done()
		return fmt.Errorf("watchdog: session %q: watch workspace %q: %w", s.id, root, err)
	}
	context.AfterFunc(&s.ctx, func() {
		defer w.wg.Done()
		stop()
	})
	return nil
}

// workspaceMonitor returns the shared monitor, starting it on first use,
// and the tests' hook.
func (w *Watchdog) workspaceMonitor() (*workspace.Monitor, func(*Session, string), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil, ErrClosed
	}
	if w.ws == nil {
		if err := workspace.NotInBubble(); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		m, err := workspace.New(w.log)
		if err != nil {
			return nil, nil, fmt.Errorf("watchdog: workspace monitor: %w", err)
		}
		w.ws = m
	}
	return w.ws, w.wsHook, nil
}

// syncWorkspace waits until the workspace monitor, if started, has
// delivered every change made before the call (see Check).
func (w *Watchdog) syncWorkspace(ctx context.Context) error {
	w.mu.Lock()
	m := w.ws
	w.mu.Unlock()
	if err := m.Sync(ctx); err != nil && !errors.Is(err, workspace.ErrClosed) { // closed: Check says so next
		return fmt.Errorf("watchdog: check: %w", err)
	}
	return nil
}

// ignorePatterns checks WatchWorkspace's ignore patterns and returns them
// without trailing slashes; none means the default.
func ignorePatterns(ignore []string) ([]string, error) {
	if len(ignore) == 0 {
		ignore = defaultWorkspaceIgnore
	}
	pats := make([]string, 0, len(ignore))
	for _, p := range ignore {
		p = strings.TrimSuffix(p, "/")
		if _, err := filepath.Match(p, ""); err != nil || p == "" {
			return nil, fmt.Errorf("workspace ignore pattern %q is malformed", p)
		}
		pats = append(pats, p)
	}
	return pats, nil
}

// validWorkspace checks Policy.WorkspaceRoot and WorkspaceIgnore, without
// touching the file system.
func validWorkspace(root string, ignore []string) error {
	if root == "" {
		if len(ignore) > 0 {
			return fmt.Errorf("%w: workspace_ignore without a workspace_root", ErrInvalidPolicy)
		}
		return nil
	}
	if err := checkName("workspace_root", root); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if !filepath.IsAbs(root) {
		return fmt.Errorf("%w: workspace_root %q is not an absolute path", ErrInvalidPolicy, root)
	}
	if _, err := ignorePatterns(ignore); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	return nil
}

// checkWorkspaceDir reports, before anything is recorded, a declared
// workspace that is not a directory here.
func checkWorkspaceDir(p Policy) error {
	if p.WorkspaceRoot == "" {
		return nil
	}
	if err := workspace.NotInBubble(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if fi, err := os.Stat(p.WorkspaceRoot); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: workspace_root %q is not a directory", ErrInvalidArgument, p.WorkspaceRoot)
	}
	return nil
}

// watchDeclared watches the workspace s's policy declares, once s's window
// is open (err nil); if it cannot, the window ends (stop, reason failed)
// and the error is returned, so that no session runs without it.
func watchDeclared(s *Session, err error) (*Session, error) {
	if err != nil {
		return s, err
	}
	if err := s.watchPolicyWorkspace(); err != nil {
		_, _ = s.stop(StopFailed)
		return nil, err
	}
	return s, nil
}

// watchPolicyWorkspace watches the workspace s's policy declares, if any.
func (s *Session) watchPolicyWorkspace() error {
	if p := s.cfg.policy; p.WorkspaceRoot != "" {
		return s.WatchWorkspace(p.WorkspaceRoot, p.WorkspaceIgnore...)
	}
	return nil
}
