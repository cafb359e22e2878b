package pebble

import "github.com/wasmjobs/wasmjobs/backend"

var (
	_ backend.DirReporter      = (*Backend)(nil)
	_ backend.QueueKeeper      = (*Backend)(nil)
	_ backend.HealthReporter   = (*Backend)(nil)
	_ backend.RecoveryReporter = (*Backend)(nil)
)

// KeepsQueued reports true: the queued, delayed and dead-lettered jobs are in the data
// directory at the next Open.
func (b *Backend) KeepsQueued() bool { return true }

// Recovery is Recovered in the backend package's terms.
func (b *Backend) Recovery() backend.Recovery {
	r := b.Recovered()
	return backend.Recovery{Ready: r.Ready, Delayed: r.Delayed, Dead: r.Dead, Waiting: r.Waiting, Queues: r.Queues, Took: r.Took}
}
