package pebble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

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
	raw, err := b.get(d.key)
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

// compactDrainedAfter is how many settles a queue sees before, once it is empty, its
// range is compacted.
const compactDrainedAfter = 100_000

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

// reopen undoes the claim's Begin after a failed settle: the delivery stays
// unacknowledged, or goes back to the queue if its stream ended meanwhile.
func (d *delivery) reopen() {
	if d.c.Reopen() {
		d.b.ids.unclaim(d.it.id)
	}
}

// finish completes a settle: the delivery leaves the stream, freeing a prefetch slot.
func (d *delivery) finish(dead bool) {
	q := d.q
	q.Lock()
	d.c.FinishLocked()
	if dead {
		q.dead++
	}
	q.deletes++
	drained := q.deletes >= compactDrainedAfter && q.Ready() == 0 && q.Unsettled() == 0
	if drained {
		q.deletes = 0
	}
	q.Unlock()
	d.c.Wake()
	if drained {
		// The queue is empty after many settles: compact its ready range so that
		// the tombstones of the jobs that went through do not linger on disk.
		prefix := readyPrefix(q.name)
		d.b.compactLater(prefix, prefixEnd(prefix))
	}
}

// settle runs one settle as one batch: the job's ready key is deleted and stage adds
// the rest (the next attempt, the dead letter, children, the record). The batch is
// committed without its own fsync (see the package comment). Once committed, stage's
// apply runs; if the commit fails, its undo does and the delivery stays unsettled.
func (d *delivery) settle(ctx context.Context, op string, dead bool,
	stage func(batch *pebbledb.Batch) (apply, undo func(), err error)) error {
	b := d.b
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := d.c.Begin(); err != nil {
		return err
	}
	batch := b.db.NewBatch()
	batch.Delete(d.key, nil)
	apply, undo, err := stage(batch)
	if err != nil {
		batch.Close()
		d.reopen()
		return err
	}
	err = b.commit(ctx, batch, pebbledb.NoSync, op, d.q.name, func() {
		if apply != nil {
			apply()
		}
		b.ids.unclaim(d.it.id)
		d.finish(dead)
	}, func() {
		if undo != nil {
			undo()
		}
		d.reopen()
	})
	if errors.Is(err, errStillWriting) {
		// The consumer will not settle this delivery again: should the write fail
		// after all, the job must go back to its queue rather than hold a prefetch
		// slot until the stream ends.
		if d.c.Orphan() {
			b.ids.unclaim(d.it.id)
		}
		return fmt.Errorf("%w: %w", backend.ErrSettleUnknown, err)
	}
	return err
}

func (d *delivery) Ack(ctx context.Context) error { return d.AckWith(ctx, nil, nil) }

// AckWith acknowledges the delivery and publishes children in the same batch, with the
// job's record (see backend.AtomicDelivery).
func (d *delivery) AckWith(ctx context.Context, children []backend.Publication, run *backend.JobRecord) error {
	b := d.b
	return d.settle(ctx, "ack", false, func(batch *pebbledb.Batch) (func(), func(), error) {
		if len(children) > 0 {
			// Children are new work: under the free-space reserve they are refused
			// like publishes, and the delivery stays unsettled.
			if err := b.space.check(); err != nil {
				return nil, nil, err
			}
		}
		applyChildren, undo, ids, err := b.stagePublications(ctx, batch, children)
		if err != nil {
			return nil, nil, err
		}
		n := b.stageSettleRecord(batch, d, backend.JobSucceeded, "", ids, run)
		applyUniq := b.stageUniqFinish(batch, d.it.id, time.Now())
		return func() {
			applyUniq()
			applyChildren()
			b.ids.remove(d.it.id)
			b.recs.add(n, b.records.maxCount)
		}, undo, nil
	})
}

func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(ctx, "retry", next, delay, false, nil)
}

func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(ctx, "defer", next, delay, true, nil)
}

// RetryWith is Retry with the job's record in the same batch.
func (d *delivery) RetryWith(ctx context.Context, next backend.Envelope, delay time.Duration, run *backend.JobRecord) error {
	return d.republish(ctx, "retry", next, delay, false, run)
}

// DeferWith is Defer with the job's record in the same batch.
func (d *delivery) DeferWith(ctx context.Context, next backend.Envelope, delay time.Duration, run *backend.JobRecord) error {
	return d.republish(ctx, "defer", next, delay, true, run)
}

// republish settles the delivery by publishing next in its place, in one batch.
func (d *delivery) republish(ctx context.Context, op string, next backend.Envelope, delay time.Duration, deferred bool, run *backend.JobRecord) error {
	b := d.b
	return d.settle(ctx, op, false, func(batch *pebbledb.Batch) (func(), func(), error) {
		q, err := b.queues.Lookup(next.Queue)
		if err != nil {
			return nil, nil, err
		}
		if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
			return nil, nil, fmt.Errorf("%s of job %s: %w", op, next.ID, err)
		}
		apply := b.stage(batch, q, next, delay, deferred)
		state := backend.JobRetrying
		if deferred {
			state = backend.JobDeferred
		}
		old := d.it.id
		if next.ID != old {
			b.stageRecord(batch, next, delay, deferred)
		}
		b.stageSettleRecord(batch, d, state, next.Reason, nil, run)
		applyUniq := b.stageUniqRename(batch, old, next.ID)
		return func() {
			applyUniq()
			if next.ID != old {
				b.ids.remove(old)
				b.ids.add(next.ID)
			}
			apply()
		}, nil, nil
	})
}

func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.DeadLetterWith(ctx, reason, nil)
}

// DeadLetterWith is DeadLetter with the job's record in the same batch.
func (d *delivery) DeadLetterWith(ctx context.Context, reason string, run *backend.JobRecord) error {
	if reason == "" {
		reason = "dead-lettered without a reason"
	}
	b := d.b
	return d.settle(ctx, "dead-letter", true, func(batch *pebbledb.Batch) (func(), func(), error) {
		raw := d.raw
		if raw == nil {
			// Never delete a key whose value was not read: the job would be lost.
			return nil, nil, fmt.Errorf("dead-lettering job %s of queue %q: its value was never read from %s", d.it.id, d.q.name, b.dir)
		}
		now := time.Now()
		batch.Set(deadKey(d.q.name, now, b.seq.Add(1)), encodeDead(nil, reason, now, raw), nil)
		n := b.stageSettleRecord(batch, d, backend.JobDead, reason, nil, run)
		applyUniq := b.stageUniqFinish(batch, d.it.id, now)
		return func() {
			applyUniq()
			b.ids.remove(d.it.id)
			b.recs.add(n, b.records.maxCount)
		}, nil, nil
	})
}
