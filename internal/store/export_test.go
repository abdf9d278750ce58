package store

// Pending is how many requests (writes and flush marks) wait for c's next
// transactions, for tests that must queue behind one in progress.
func Pending(c *Committer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
