package rabbitmq

// DeclaredQueues returns the names of the queues b declared, for the tests' cleanup.
func DeclaredQueues(b *Backend) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.declared))
	for name := range b.declared {
		names = append(names, name)
	}
	return names
}
