package stream

import (
	"iter"
	"maps"
	"slices"
	"sync"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Directory is a backend's declared queues by name and whether the backend is closed,
// under one read-write lock: every operation starts by looking up its queue, and none
// finds one once the backend is closed. The backend may hold the lock (Lock, RLock)
// for what it keeps beside them; the methods named ...Locked expect it held, the
// others take it. The zero value is an empty, open directory.
type Directory[Q any] struct {
	sync.RWMutex
	queues map[string]Q
	closed bool
}

// Lookup returns the declared queue named name, backend.ErrShutDown once the backend
// is closed, or backend.UnknownQueue's error.
func (d *Directory[Q]) Lookup(name string) (Q, error) {
	d.RLock()
	defer d.RUnlock()
	var zero Q
	if d.closed {
		return zero, backend.ErrShutDown
	}
	q, ok := d.queues[name]
	if !ok {
		return zero, backend.UnknownQueue(name)
	}
	return q, nil
}

// IsClosed reports whether the backend is closed.
func (d *Directory[Q]) IsClosed() bool {
	d.RLock()
	defer d.RUnlock()
	return d.closed
}

// Snapshot returns every declared queue, in no order, or backend.ErrShutDown once the
// backend is closed: for going through them without the lock.
func (d *Directory[Q]) Snapshot() ([]Q, error) {
	d.RLock()
	defer d.RUnlock()
	if d.closed {
		return nil, backend.ErrShutDown
	}
	return slices.Collect(maps.Values(d.queues)), nil
}

// ClosedLocked reports whether the backend is closed. The lock is held.
func (d *Directory[Q]) ClosedLocked() bool { return d.closed }

// CloseLocked marks the backend closed and reports whether this was the first call.
// The lock is held.
func (d *Directory[Q]) CloseLocked() (first bool) {
	first = !d.closed
	d.closed = true
	return first
}

// GetLocked returns the queue named name, if declared. The lock is held, or the
// backend is still being opened and nobody else can see it.
func (d *Directory[Q]) GetLocked(name string) (Q, bool) {
	q, ok := d.queues[name]
	return q, ok
}

// PutLocked adds the queue q under name. The lock is held, or the backend is still
// being opened and nobody else can see it.
func (d *Directory[Q]) PutLocked(name string, q Q) {
	if d.queues == nil {
		d.queues = make(map[string]Q)
	}
	d.queues[name] = q
}

// AllLocked yields every declared queue, in no order. The lock is held.
func (d *Directory[Q]) AllLocked() iter.Seq[Q] { return maps.Values(d.queues) }
