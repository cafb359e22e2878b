package pebble

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

// Consume starts a stream of the declared queue qc.Name with prefetch qc.Prefetch.
func (b *Backend) Consume(ctx context.Context, qc backend.QueueConfig) (backend.Stream, error) {
	qc = qc.Normalize(b.log)
	q, err := b.queues.Lookup(qc.Name)
	if err != nil {
		return nil, err
	}
	if err := b.failure(); err != nil {
		return nil, err
	}
	return b.streams.Consume(ctx, q.Queue, qc.Prefetch, func(c *stream.Claim[*item]) (backend.Delivery, error) { return b.deliver(q, c) })
}

// Level and Requeue make an item a ready item of the stream core.
func (it *item) Level() int { return int(it.priority) }

// Requeue marks an item that goes back to its queue as redelivered.
func (it *item) Requeue() { it.redelivered = true }

// ID is the job's id, for the queue's key gate.
func (it *item) ID() string { return it.id }

// Key is the job's concurrency key, for the queue's key gate.
func (it *item) Key() string { return it.ckey }

// bySeq orders items by their sequence: the order they were published in, which is
// the order of their keys and so of the next Open.
func bySeq(a, b *item) int { return cmp.Compare(a.seq, b.seq) }

// deliver makes the delivery of a job a stream of q took, and reads its value. A job
// whose value cannot be read is never handed out: it goes back to the front of its
// queue (it is still on disk, as far as anyone knows) and the store fails, which ends
// every stream; an error is returned then.
func (b *Backend) deliver(q *queue, c *stream.Claim[*item]) (backend.Delivery, error) {
	it := c.Item()
	b.ids.claim(it.id)
	d := &delivery{b: b, q: q, c: c, it: it, redelivered: it.redelivered}
	// Nobody else touches a claimed job's key, so it is read outside the lock.
	d.key = q.key(it)
	// Kept since its publish, the value goes to this delivery: should the stream end
	// before the settle, the next delivery reads it from the store.
	raw, err := b.hot.take(it), error(nil)
	if raw == nil {
		raw, err = b.get(d.key)
	}
	if err != nil {
		// The index holds a job the store cannot give: the store is damaged or the
		// engine is failing. Handing the job out without its value would let the
		// worker dead-letter (and delete) a job nobody read.
		err = b.fail(fmt.Errorf("%w: %w: %s: reading job %s of queue %q (key %q): %v",
			ErrStoreFailed, ErrCorrupt, b.dir, it.id, q.name, d.key, err))
		b.log.Error("reading a ready job; the store is failed", "dir", b.dir, "queue", q.name, "job", it.id, "error", err)
		return nil, err // the stream ends and puts the job back
	}
	d.raw = raw
	d.env, d.decodeErr = decodeEnvelope(raw)
	if d.env.Queue == "" {
		d.env.Queue = q.name
	}
	if d.env.ID == "" && d.decodeErr != nil {
		d.env.ID = it.id
	}
	return d, nil
}

// get reads the value of key, copied.
func (b *Backend) get(key []byte) ([]byte, error) {
	v, closer, err := b.db.Get(key)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

var (
	_ backend.AtomicDelivery      = (*delivery)(nil)
	_ backend.CancellableDelivery = (*delivery)(nil)
)

// delivery is a job handed to a consumer.
type delivery struct {
	b           *Backend
	q           *queue
	c           *stream.Claim[*item]
	it          *item
	key         []byte
	raw         []byte
	env         backend.Envelope
	decodeErr   error
	redelivered bool
}

func (d *delivery) Envelope() (backend.Envelope, error) {
	// Read by its consumer, it is no longer on offer, whether or not the stream has
	// counted its send yet.
	d.c.Received()
	env := d.env.Clone()
	env.Redelivered = d.redelivered
	return env, d.decodeErr
}

// hotValues bounds the bytes of the ready jobs' values kept in memory (item.value):
// a job delivered soon after its publish, as most are, is then not read back from the
// store, which for a backlog flushed from the memtable means a table read and a block
// decoded per job.
type hotValues struct {
	bytes atomic.Int64
}

// maxHotBytes is hotValues' budget: past it, new jobs' values are read at delivery.
const maxHotBytes = 32 << 20

// keep returns v if the budget has room for it (its capacity, what it holds of
// memory, counted until take), else nil.
func (h *hotValues) keep(v []byte) []byte {
	if h.bytes.Add(int64(cap(v))) > maxHotBytes {
		h.bytes.Add(-int64(cap(v)))
		return nil
	}
	return v
}

// take returns the value it keeps, if any, and frees its room: the item is being
// delivered or leaves the index.
func (h *hotValues) take(it *item) []byte {
	v := it.value
	if v != nil {
		it.value = nil
		h.bytes.Add(-int64(cap(v)))
	}
	return v
}
