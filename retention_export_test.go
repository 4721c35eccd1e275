package watchdog

// MemoryStoreSize returns the positions m's log uses and the events it
// keeps, for the retention tests.
func MemoryStoreSize(m *MemoryStore) (logLen, live int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.logLen, m.idx.Live()
}
