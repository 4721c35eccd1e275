package watchdog

// SetWorkspaceHook installs f, called after each workspace change the
// monitor records. Call it before the first WatchWorkspace.
func SetWorkspaceHook(w *Watchdog, f func(*Session)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wsHook = f
}
