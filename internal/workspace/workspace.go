// Package workspace is the Watchdog's one fsnotify watcher, shared by every
// session that watches a workspace, so that the number of sessions is not
// bounded by the system's limit on inotify instances.
package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Monitor watches directory trees and reports changes to the watches
// interested in them. Its methods are safe for concurrent use.
type Monitor struct {
	fsw  *fsnotify.Watcher
	log  *zap.Logger
	mu   sync.Mutex
	dirs map[string]map[*watch]struct{} // watched directory -> interested watches
	done chan struct{}
}

type watch struct {
	root    string
	ignore  []string
	changed func(path string)
	// dirs are ww's directories, each true if watched flat: without its
	// subdirectories, every change in it counted. Guarded by the monitor's
	// mu, and set with the directory's registration, so that the Monitor's
	// goroutine never sees a directory without its kind.
	dirs map[string]bool
}

// New starts a Monitor and its goroutine, which ends at Close.
func New(log *zap.Logger) (*Monitor, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	m := &Monitor{fsw: fsw, log: log, dirs: make(map[string]map[*watch]struct{}), done: make(chan struct{})}
	go m.run()
	return m, nil
}

// Watch calls changed with the path, on the Monitor's goroutine, after each change under
// root (an absolute directory), recursively and new directories included,
// except under ignored paths: a path is ignored when one of its elements
// relative to root matches a pattern of ignore (filepath.Match syntax,
// checked by the caller). Each directory of flat (absolute, typically an
// ignored .git) is watched too, without its subdirectories, and every
// change of its own entries counts, ignored or not. The returned func ends
// the watch.
func (m *Monitor) Watch(root string, ignore, flat []string, changed func(path string)) (stop func(), err error) {
	ww := &watch{root: root, ignore: ignore, changed: changed, dirs: make(map[string]bool)}
	if err := m.addTree(ww, root); err != nil {
		m.remove(ww)
		return nil, err
	}
	for _, dir := range flat {
		if err := m.add(ww, dir, true); err != nil {
			m.remove(ww)
			return nil, err
		}
	}
	return func() { m.remove(ww) }, nil
}

// Close stops the Monitor and waits for its goroutine.
func (m *Monitor) Close() {
	_ = m.fsw.Close()
	<-m.done
}

func (m *Monitor) run() {
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

func (m *Monitor) handle(ev fsnotify.Event) {
	dir := filepath.Dir(ev.Name)
	m.mu.Lock()
	var interested []*watch
	var flat []bool
	for ww := range m.dirs[dir] {
		interested, flat = append(interested, ww), append(flat, ww.dirs[dir])
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		for ww := range m.dirs[ev.Name] { // a watched directory went away
			delete(ww.dirs, ev.Name)
		}
		delete(m.dirs, ev.Name)
	}
	m.mu.Unlock()
	for i, ww := range interested {
		if flat[i] {
			ww.changed(ev.Name)
			continue
		}
		rel, err := filepath.Rel(ww.root, ev.Name)
		if err != nil || ww.ignored(rel) {
			continue
		}
		if ev.Has(fsnotify.Create) {
			if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
				if err := m.addTree(ww, ev.Name); err != nil {
					m.log.Warn("watchdog: workspace monitor: new directory", zap.String("path", ev.Name), zap.Error(err))
				}
			}
		}
		ww.changed(ev.Name)
	}
}

func (ww *watch) ignored(rel string) bool {
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
func (m *Monitor) addTree(ww *watch, dir string) error {
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
		if err := m.add(ww, path, false); err != nil && path == dir && dir == ww.root {
			return err
		}
		return nil
	})
}

// add watches the directory path for ww, flat or not.
func (m *Monitor) add(ww *watch, path string, flat bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.dirs[path]; !ok {
		if err := m.fsw.Add(path); err != nil {
			return err
		}
		m.dirs[path] = make(map[*watch]struct{})
	}
	m.dirs[path][ww] = struct{}{}
	ww.dirs[path] = flat
	return nil
}

// remove drops ww's interest in its directories, unwatching those nobody
// else watches.
func (m *Monitor) remove(ww *watch) {
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
