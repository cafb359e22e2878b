package pebble

import (
	"context"
	"fmt"
	"sync/atomic"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

// queue is one declared queue: its index of ready jobs and its streams (the stream
// core's Queue), and beside them its counts, guarded by the Queue's lock.
type queue struct {
	*stream.Queue[*item]
	name string

	delayed  int
	deferred int
	dead     int
	deletes  int // settles since the queue's range was last compacted
	// keyLimit is the bound on each concurrency key as stored with the declaration.
	keyLimit atomic.Int64
}

// setKeyLimit bounds each concurrency key's running jobs at n, as declared.
func (q *queue) setKeyLimit(n int) {
	q.keyLimit.Store(int64(n))
	q.SetKeyLimit(n)
}

func newQueue(name string, levels int) *queue {
	return &queue{Queue: stream.NewQueue[*item](levels), name: name}
}

// item is a ready job in the index: where its value is, its id, and its concurrency
// key with its place in the key's line (the sequence of its first publish, stored in
// its value: see encodeEnvelope).
type item struct {
	seq         uint64
	priority    uint8 // as in its key: already clamped to the queue's levels
	id          string
	redelivered bool
	ckey        string
	line        uint64
	// fresh says that the job's record holds no attempt yet (a publish wrote it), so
	// that its first settle need not read the record back to append to its attempts.
	fresh bool
	// value is the job's stored value, kept in memory from the write that made it
	// ready (a publish, a retry, a waiting job's release) to its first delivery while
	// the backend's budget for them allows (hotValues); nil otherwise (past the
	// budget, a delayed job come due, a job loaded at Open), when the delivery reads
	// it from the store.
	value []byte
}

func (q *queue) key(it *item) []byte { return readyKey(q.name, it.priority, it.seq) }

// Declare creates the queue q.Name if it does not exist, durably. The first
// declaration wins, as on a broker: declaring it again with the same priority levels
// changes nothing, and with other levels fails and changes nothing. Concurrent
// declarations of one name are ordered: the name is claimed before the commit, so
// that only the winner's levels reach the disk.
func (b *Backend) Declare(ctx context.Context, qc backend.QueueConfig) error {
	if err := backend.ValidateQueueName(qc.Name); err != nil {
		return err
	}
	qc = qc.Normalize(b.log)
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	conflict := func(have int) error {
		return fmt.Errorf("queue %q exists with %d priority levels, not the %d wanted: it keeps its first declaration", qc.Name, have, qc.PriorityLevels)
	}
	b.queues.Lock()
	if q, ok := b.queues.GetLocked(qc.Name); ok {
		b.queues.Unlock()
		if q.Levels() != qc.PriorityLevels {
			return conflict(q.Levels())
		}
		if int(q.keyLimit.Load()) == qc.KeyConcurrency {
			return nil
		}
		// A new bound on the keys is stored with the declaration, so that the next
		// Open keeps it before anyone declares the queue again.
		batch := b.db.NewBatch()
		batch.Set(queueKey(qc.Name), encodeQueue(qc.PriorityLevels, qc.KeyConcurrency), nil)
		return b.commit(ctx, batch, pebbledb.Sync, "declare", qc.Name, func() { q.setKeyLimit(qc.KeyConcurrency) }, nil)
	}
	if p, ok := b.declaring[qc.Name]; ok {
		b.queues.Unlock()
		if p.levels != qc.PriorityLevels {
			return conflict(p.levels)
		}
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p := &declaration{levels: qc.PriorityLevels, done: make(chan struct{})}
	b.declaring[qc.Name] = p
	b.queues.Unlock()
	batch := b.db.NewBatch()
	batch.Set(queueKey(qc.Name), encodeQueue(qc.PriorityLevels, qc.KeyConcurrency), nil)
	return b.commit(ctx, batch, pebbledb.Sync, "declare", qc.Name, func() {
		b.queues.Lock()
		nq := newQueue(qc.Name, qc.PriorityLevels)
		nq.setKeyLimit(qc.KeyConcurrency)
		b.queues.PutLocked(qc.Name, nq)
		delete(b.declaring, qc.Name)
		b.queues.Unlock()
		close(p.done)
	}, func() {
		b.queues.Lock()
		delete(b.declaring, qc.Name)
		b.queues.Unlock()
		p.err = fmt.Errorf("declaring queue %q in %s: the concurrent declaration failed", qc.Name, b.dir)
		close(p.done)
	})
}

// declaration is a queue being declared: its name is claimed, its commit in flight.
// err is set before done is closed.
type declaration struct {
	levels int
	done   chan struct{}
	err    error
}
