package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// defaultWorkspaceIgnore are the patterns WatchWorkspace ignores when it is
// given none.
var defaultWorkspaceIgnore = []string{".git"}

// workspaceMonitor is the Watchdog's one fsnotify watcher, shared by every
// session that watches a workspace, so that the number of sessions is not
// bounded by the system's limit on inotify instances.
type workspaceMonitor struct {
	fsw  *fsnotify.Watcher
	log  *zap.Logger
	mu   sync.Mutex
	dirs map[string]map[*wsWatch]struct{} // watched directory -> interested watches
	done chan struct{}
	hook func(*Session, fsnotifyEvent) // tests: called after each recorded change
}

type wsWatch struct {
	s      *Session
	root   string
	ignore []string
	dirs   map[string]struct{} // guarded by the monitor's mu
}

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
	m, err := w.workspaceMonitor()
	if err != nil {
		return err
	}
	ww := &wsWatch{s: s, root: abs, ignore: pats, dirs: make(map[string]struct{})}

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

	if err := m.addTree(ww, abs); err != nil {
		m.remove(ww)
		w.wg.Done()
		return fmt.Errorf("watchdog: session %q: watch workspace %q: %w", s.id, root, err)
	}
	context.AfterFunc(s.ctx, func() {
		defer w.wg.Done()
		m.remove(ww)
	})
	return nil
}

// workspaceMonitor returns the shared monitor, starting it on first use.
func (w *Watchdog) workspaceMonitor() (*workspaceMonitor, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	if w.ws != nil {
		return w.ws, nil
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watchdog: workspace monitor: %w", err)
	}
	m := &workspaceMonitor{fsw: fsw, log: w.log, dirs: make(map[string]map[*wsWatch]struct{}),
		done: make(chan struct{}), hook: w.wsHook}
	w.ws = m
	w.wg.Add(1)
	go func() { defer w.wg.Done(); m.run() }()
	return m, nil
}

func (m *workspaceMonitor) run() {
	defer close(m.done)
	for {
		select {
		case ev, ok := <-m.fsw.Events:
			if !ok {
				return
			}
			m.handle(ev)
		case err, ok := <-m.fsw.Errors:
			if !ok {
				return
			}
			m.log.Warn("watchdog: workspace monitor", zap.Error(err))
		}
	}
}

func (m *workspaceMonitor) handle(ev fsnotify.Event) {
	m.mu.Lock()
	var interested []*wsWatch
	for ww := range m.dirs[filepath.Dir(ev.Name)] {
		interested = append(interested, ww)
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		for ww := range m.dirs[ev.Name] { // a watched directory went away
			delete(ww.dirs, ev.Name)
		}
		delete(m.dirs, ev.Name)
	}
	m.mu.Unlock()
	for _, ww := range interested {
		rel, err := filepath.Rel(ww.root, ev.Name)
		if err != nil || ww.ignored(rel) {
			continue
		}
		ww.s.Touch(ChannelWorkspace)
		if ev.Has(fsnotify.Create) {
			if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
				if err := m.addTree(ww, ev.Name); err != nil {
					m.log.Warn("watchdog: workspace monitor: new directory", zap.String("path", ev.Name), zap.Error(err))
				}
			}
		}
		if m.hook != nil {
			m.hook(ww.s, ev)
		}
	}
}

func (ww *wsWatch) ignored(rel string) bool {
	for _, el := range strings.Split(rel, string(filepath.Separator)) {
		for _, p := range ww.ignore {
			if ok, _ := filepath.Match(p, el); ok {
				return true
			}
		}
	}
	return false
}

// addTree watches dir and every directory below it that is not ignored.
func (m *workspaceMonitor) addTree(ww *wsWatch, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a subdirectory vanished or is unreadable: skip it
		}
		if !d.IsDir() {
			return nil
		}
		if rel, _ := filepath.Rel(ww.root, path); rel != "." && ww.ignored(rel) {
			return filepath.SkipDir
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.dirs[path]; !ok {
			if err := m.fsw.Add(path); err != nil {
				if path == dir && dir == ww.root {
					return err
				}
				return nil
			}
			m.dirs[path] = make(map[*wsWatch]struct{})
		}
		m.dirs[path][ww] = struct{}{}
		ww.dirs[path] = struct{}{}
		return nil
	})
}

// remove drops ww's interest in its directories, unwatching those nobody
// else watches.
func (m *workspaceMonitor) remove(ww *wsWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for dir := range ww.dirs {
		set := m.dirs[dir]
		delete(set, ww)
		if len(set) == 0 {
			delete(m.dirs, dir)
			if err := m.fsw.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, fsnotify.ErrClosed) {
				m.log.Debug("watchdog: workspace monitor: unwatch", zap.String("path", dir), zap.Error(err))
			}
		}
	}
	clear(ww.dirs)
}

func (m *workspaceMonitor) close() {
	_ = m.fsw.Close()
	<-m.done
}

type fsnotifyEvent = fsnotify.Event
