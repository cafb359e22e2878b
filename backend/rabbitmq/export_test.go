package rabbitmq

import "time"

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

// SetTokenCycle shortens how often b's leader re-publishes the schedules' token and a
// waiting host checks that one exists.
func SetTokenCycle(b *Backend, d time.Duration) { b.tokenCycle = d }

// AnswerGrace is how long the broker may stay silent while a call outlives its context
// before the connection is torn down.
const AnswerGrace = answerGrace
