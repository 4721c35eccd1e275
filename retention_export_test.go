package watchdog

// MemoryStoreSize returns the records m's log holds, forgotten ones
// included, and the events it keeps, for the retention tests.
func MemoryStoreSize(m *MemoryStore) (logLen, live int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.Len(), m.idx.Live()
}
