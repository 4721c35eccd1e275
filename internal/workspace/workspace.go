// Package workspace is the Watchdog's one fsnotify watcher, shared by every
// session that watches a workspace, so that the number of sessions is not
// bounded by the system's limit on inotify instances.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

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

	// Sync's sentinel directory (made on first use), its next file's
	// number and the files Sync waits for; guarded by mu.
	syncDir string
	syncN   int
	syncs   map[string]chan struct{}
}

type watch struct {
	root    string
	ignore  []string
	changed func(path string)
	dirs    map[string]role // guarded by the monitor's mu, set with the directory's registration
}

// role is what a watched directory is to a watch: which of its changes
// count, and which new subdirectories are watched in turn.
type role uint8

const (
	// tree: a workspace directory. Changes count unless ignored; new
	// subdirectories are watched as trees, a new .git the patterns ignore
	// as a repository.
	tree role = iota
	// repo: a repository's .git. Every change counts; a new objects/ is
	// watched as the object store.
	repo
	// objects: a repository's object store. Every change counts; each new
	// subdirectory (a fan-out directory of loose objects, pack/) is watched
	// as flat.
	objects
	// flat: every change counts; subdirectories are not watched.
	flat
)

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

// Watch calls changed with the path, on the Monitor's goroutine, after each
// change under root (an absolute directory), recursively and new
// directories included, except under ignored paths: a path is ignored when
// one of its elements relative to root matches a pattern of ignore
// (filepath.Match syntax, checked by the caller). The returned func ends
// the watch.
//
// Git work counts even when ignore ignores ".git": a directory named .git
// that the patterns ignore, in a directory that is watched (at any depth,
// there at Watch time or created later by git init or git clone), is a
// repository's, and its top level, its objects/ and each directory in
// objects/ (the fan-out directories of loose objects, pack/) are watched
// without their other subdirectories (refs/, logs/), every change of their
// entries counted. A .git file (a worktree's, a submodule's) is not
// followed.
func (m *Monitor) Watch(root string, ignore []string, changed func(path string)) (stop func(), err error) {
	ww := &watch{root: root, ignore: ignore, changed: changed, dirs: make(map[string]role)}
	if err := m.addTree(ww, root); err != nil {
		m.remove(ww)
		return nil, err
	}
	return func() { m.remove(ww) }, nil
}

// Close stops the Monitor and waits for its goroutine.
func (m *Monitor) Close() {
	_ = m.fsw.Close()
	<-m.done
	m.mu.Lock()
	dir := m.syncDir
	m.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

func (m *Monitor) closed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// releaseSyncs ends every Sync waiting: after an overflow of the kernel's
// queue its sentinel may never come, and what it waited for is lost.
func (m *Monitor) releaseSyncs() {
	m.mu.Lock()
	for path, seen := range m.syncs {
		delete(m.syncs, path)
		close(seen)
	}
	m.mu.Unlock()
}

// syncBound is how long Sync waits for its sentinel at most: the watcher
// delivers it in microseconds unless something is wrong.
const syncBound = 10 * time.Second

// ErrClosed is what Sync returns once the Monitor is closed.
var ErrClosed = errors.New("workspace monitor closed")

// NotInBubble refuses a workspace inside a testing/synctest bubble, where
// time.Now carries no monotonic reading: the watcher's goroutine waits on
// I/O, which the bubble does not count as durably blocked, so the bubble's
// time would never move again.
func NotInBubble() error {
	if t := time.Now(); t == t.Round(0) {
		return errors.New("a workspace cannot be watched inside a testing/synctest bubble: the file watcher waits on I/O, " +
			"which the bubble does not count as blocked, so its time would never move and the test would hang; " +
			"test the workspace on a *clock.Mock outside the bubble (see docs/testing.md)")
	}
	return nil
}

// Sync waits until the Monitor has handled every change made before it
// was called (each watch's changed has returned), until ctx ends, and 10 s
// at most; a nil Monitor has none. After an overflow of the kernel's queue
// (changes dropped) it returns at once. It
// writes a sentinel file in a directory of its own, watched by the same
// watcher, and waits for the Monitor to read its event: the kernel queues
// one watcher's events in order (inotify), so every earlier change was read
// first. On systems whose watcher does not keep that order across
// directories (Windows) Sync only bounds the wait.
func (m *Monitor) Sync(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if m.closed() {
		return ErrClosed
	}
	m.mu.Lock()
	if m.syncDir == "" {
		dir, err := os.MkdirTemp("", "watchdog-sync-")
		if err == nil {
			if err = m.fsw.Add(dir); err != nil {
				_ = os.RemoveAll(dir)
			}
		}
		if err != nil {
			m.mu.Unlock()
			return fmt.Errorf("workspace monitor: sync: %w", err)
		}
		m.syncDir, m.syncs = dir, make(map[string]chan struct{})
	}
	m.syncN++
	path := filepath.Join(m.syncDir, strconv.Itoa(m.syncN))
	seen := make(chan struct{})
	m.syncs[path] = seen
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.syncs, path)
		m.mu.Unlock()
		_ = os.Remove(path)
	}()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		if m.closed() { // Close removed the directory
			return ErrClosed
		}
		return fmt.Errorf("workspace monitor: sync: %w", err)
	}
	bound := time.NewTimer(syncBound)
	defer bound.Stop()
	select {
	case <-seen:
		return nil
	case <-m.done:
		return ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-bound.C:
		return fmt.Errorf("workspace monitor: sync: the watcher delivered no sentinel change within %v", syncBound)
	}
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
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				m.releaseSyncs() // the kernel dropped events, a sentinel among them maybe
			}
		}
	}
}

// interest is a watch interested in an event, and what the event's
// directory is to it.
type interest struct {
	ww   *watch
	role role
}

func (m *Monitor) handle(ev fsnotify.Event) {
	dir := filepath.Dir(ev.Name)
	m.mu.Lock()
	if m.syncDir != "" && dir == m.syncDir { // Sync's sentinel: not a workspace's change
		if seen, ok := m.syncs[ev.Name]; ok {
			delete(m.syncs, ev.Name)
			close(seen)
		}
		m.mu.Unlock()
		return
	}
	var interested []interest
	for ww := range m.dirs[dir] {
		interested = append(interested, interest{ww, ww.dirs[dir]})
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		for ww := range m.dirs[ev.Name] { // a watched directory went away
			delete(ww.dirs, ev.Name)
		}
		delete(m.dirs, ev.Name)
	}
	m.mu.Unlock()
	for _, in := range interested {
		if m.follow(in, ev) {
			in.ww.changed(ev.Name)
		}
	}
}

// follow reports whether ev counts for in.ww, once it has watched the
// directory ev created, if it is one to watch.
func (m *Monitor) follow(in interest, ev fsnotify.Event) bool {
	ww := in.ww
	var add func(*watch, string) error
	switch in.role {
	case tree:
		rel, err := filepath.Rel(ww.root, ev.Name)
		if err != nil {
			return false
		}
		add = m.addTree
		if ww.ignored(rel) {
			// The directory is not ignored, so the event's own name is: a
			// .git appearing (git init, git clone) is a repository's.
			if filepath.Base(ev.Name) != ".git" {
				return false
			}
			add = m.addRepo
		}
	case repo:
		if filepath.Base(ev.Name) == "objects" {
			add = m.addObjects
		}
	case objects:
		add = m.addFlat
	}
	if add != nil && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := add(ww, ev.Name); err != nil {
				m.log.Warn("watchdog: workspace monitor: new directory", zap.String("path", ev.Name), zap.Error(err))
			}
		}
	}
	return true
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

// addTree watches dir and every directory below it that is not ignored,
// and every repository (a .git the patterns ignore) among them.
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
			if d.Name() == ".git" {
				_ = m.addRepo(ww, path) // like a subdirectory, skipped if it cannot be watched
			}
			return filepath.SkipDir
		}
		if err := m.add(ww, path, tree); err != nil && path == dir && dir == ww.root {
			return err
		}
		return nil
	})
}

// addRepo watches the repository directory git: its top level and its
// object store.
func (m *Monitor) addRepo(ww *watch, git string) error {
	if err := m.add(ww, git, repo); err != nil {
		return err
	}
	return m.addObjects(ww, filepath.Join(git, "objects"))
}

// addObjects watches a repository's object store, if it is there yet, and
// each directory in it.
func (m *Monitor) addObjects(ww *watch, dir string) error {
	if err := m.add(ww, dir, objects); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // git init has not made it yet: its creation is an event in .git
		}
		return err
	}
	ents, err := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			if err := m.addFlat(ww, filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// addFlat watches dir, a directory in an object store.
func (m *Monitor) addFlat(ww *watch, dir string) error { return m.add(ww, dir, flat) }

// add watches the directory path for ww, in role r. The role is set under
// the lock, with the registration that lets the Monitor's goroutine see it.
func (m *Monitor) add(ww *watch, path string, r role) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.dirs[path]; !ok {
		if err := m.fsw.Add(path); err != nil {
			return err
		}
		m.dirs[path] = make(map[*watch]struct{})
	}
	m.dirs[path][ww] = struct{}{}
	ww.dirs[path] = r
	return nil
}

// remove drops ww's interest in its directories, unwatching those nobody
// else watches.
func (m *Monitor) remove(ww *watch) {
	var failed []zap.Field // logged once the lock is released
	m.mu.Lock()
	for dir := range ww.dirs {
		set := m.dirs[dir]
		delete(set, ww)
		if len(set) == 0 {
			delete(m.dirs, dir)
			if err := m.fsw.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, fsnotify.ErrClosed) && len(failed) < 2*8 {
				failed = append(failed, zap.String("path", dir), zap.Error(err))
			}
		}
	}
	clear(ww.dirs)
	m.mu.Unlock()
	for i := 0; i < len(failed); i += 2 {
		m.log.Debug("watchdog: workspace monitor: unwatch", failed[i:i+2]...)
	}
}
