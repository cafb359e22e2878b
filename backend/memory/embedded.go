package memory

import "github.com/wasmjobs/wasmjobs/backend"

var _ backend.QueueKeeper = (*Backend)(nil)

// KeepsQueued reports false: what is queued is dropped at Close.
func (b *Backend) KeepsQueued() bool { return false }
