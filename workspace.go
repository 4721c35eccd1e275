package watchdog

import (
	"context"
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
//
// It returns an error wrapping ErrInvalidArgument for an empty root, a root
// that is not a directory, or a bad pattern; the window's end cause if the
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
	if len(ignore) == 0 {
		ignore = defaultWorkspaceIgnore
	}
	pats := make([]string, 0, len(ignore))
	for _, p := range ignore {
		p = strings.TrimSuffix(p, "/")
		if _, err := filepath.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("%w: workspace ignore pattern %q is malformed", ErrInvalidArgument, p)
		}
		pats = append(pats, p)
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

	stop, err := m.Watch(abs, pats, func() {
		s.Touch(ChannelWorkspace)
		if hook != nil {
			hook(s)
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
func (w *Watchdog) workspaceMonitor() (*workspace.Monitor, func(*Session), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil, ErrClosed
	}
	if w.ws == nil {
		m, err := workspace.New(w.log)
		if err != nil {
			return nil, nil, fmt.Errorf("watchdog: workspace monitor: %w", err)
		}
		w.ws = m
	}
	return w.ws, w.wsHook, nil
}
