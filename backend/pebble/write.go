package pebble

import (
	"context"
	"errors"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// enter starts an operation that uses the store, or says why none can start. The
// caller calls b.ops.Done when it is finished.
func (b *Backend) enter() error {
	b.queues.RLock()
	defer b.queues.RUnlock()
	if b.queues.ClosedLocked() {
		return backend.ErrShutDown
	}
	if p := b.failed.Load(); p != nil {
		return *p
	}
	b.ops.Add(1)
	return nil
}

// Publish puts env on env.Queue, after delay rounded up to the granularity, and returns
// once it is on disk. A job whose id the backend holds (waiting, delayed or handed
// out) is not published again: Publish reports success and changes nothing.
func (b *Backend) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.publish(ctx, env, delay, false)
}

// Defer holds env for delay rounded up to the granularity, then puts it on env.Queue;
// it returns once the job is on disk.
func (b *Backend) Defer(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.publish(ctx, env, delay, true)
}

func (b *Backend) publish(ctx context.Context, env backend.Envelope, delay time.Duration, deferred bool) error {
	return b.publishWith(ctx, "publish", env, delay, deferred, nil, "")
}

// publishWith publishes env in one synced batch, as op, with what extra adds to the
// batch (nil adds nothing). A job whose id the backend holds is not published again:
// without extra nothing is written (a repeat publish is dropped); with extra, the
// batch still commits, as heldOp, with only what extra added.
func (b *Backend) publishWith(ctx context.Context, op string, env backend.Envelope, delay time.Duration, deferred bool,
	extra func(*pebbledb.Batch), heldOp string) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	q, err := b.queues.Lookup(env.Queue)
	if err != nil {
		return err
	}
	if err := backend.CheckDelay(delay, backend.MaxDelay); err != nil {
		return fmt.Errorf("publishing job %s to %q: %w", env.ID, env.Queue, err)
	}
	if err := b.space.check(); err != nil {
		return err
	}
	owned, err := b.ids.reserve(ctx, env.ID)
	if err != nil || (!owned && extra == nil) {
		return err // nil when the id is held: a repeat publish is dropped
	}
	batch := b.db.NewBatch()
	if extra != nil {
		extra(batch)
	}
	if !owned {
		return b.commit(ctx, batch, pebbledb.Sync, heldOp, env.Queue, nil, nil)
	}
	apply := b.stage(batch, q, env, delay, deferred)
	b.stageRecord(batch, env, delay, deferred)
	return b.commit(ctx, batch, pebbledb.Sync, op, env.Queue, func() {
		b.ids.settle(env.ID, true)
		apply()
	}, func() { b.ids.settle(env.ID, false) })
}

// PublishBatch publishes every publication in one synced batch: all of them or none.
// Publications whose id the backend holds, or that repeat an id of the batch, are
// dropped.
func (b *Backend) PublishBatch(ctx context.Context, pubs []backend.Publication) error {
	if len(pubs) == 0 {
		return nil
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := b.space.check(); err != nil {
		return err
	}
	batch := b.db.NewBatch()
	apply, undo, _, err := b.stagePublications(ctx, batch, pubs)
	if err != nil {
		batch.Close()
		return err
	}
	return b.commit(ctx, batch, pebbledb.Sync, "publish batch", pubs[0].Envelope.Queue, apply, undo)
}

// stagePublications adds pubs to batch with their records. Every queue is checked
// before anything is staged. It returns what to do once the batch is committed, what
// to undo if it is not, and the ids of pubs in order.
func (b *Backend) stagePublications(ctx context.Context, batch *pebbledb.Batch, pubs []backend.Publication) (apply, undo func(), ids []string, err error) {
	queues := make([]*queue, len(pubs))
	for i, p := range pubs {
		if queues[i], err = b.queues.Lookup(p.Envelope.Queue); err != nil {
			return nil, nil, nil, err
		}
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return nil, nil, nil, fmt.Errorf("publishing job %s to %q: %w", p.Envelope.ID, p.Envelope.Queue, err)
		}
	}
	var reserved []string
	var applies []func()
	undo = func() {
		for _, id := range reserved {
			b.ids.settle(id, false)
		}
	}
	seen := make(map[string]bool, len(pubs))
	for i, p := range pubs {
		env := p.Envelope
		if env.ID != "" {
			ids = append(ids, env.ID)
			if seen[env.ID] {
				continue
			}
			seen[env.ID] = true
		}
		owned, err := b.ids.reserve(ctx, env.ID)
		if err != nil {
			undo()
			return nil, nil, nil, err
		}
		if !owned {
			continue // held already: a repeat publish is dropped
		}
		if env.ID != "" {
			reserved = append(reserved, env.ID)
		}
		applies = append(applies, b.stage(batch, queues[i], env, p.Delay, false))
		b.stageRecord(batch, env, p.Delay, false)
	}
	apply = func() {
		for _, id := range reserved {
			b.ids.settle(id, true)
		}
		for _, f := range applies {
			f()
		}
	}
	return apply, undo, ids, nil
}

// stage adds env to batch as a new ready or delayed job of q, whose record the same
// batch writes without attempts (stageRecord), and returns what to do to the in-memory
// index once the batch is committed.
func (b *Backend) stage(batch *pebbledb.Batch, q *queue, env backend.Envelope, delay time.Duration, deferred bool) func() {
	return b.stageAt(batch, q, env, delay, deferred, 0, true)
}

// stageAt is stage for a job whose place in its key's line is line: that of the job
// it republishes, or zero for a new one, whose place is its sequence; fresh says that
// its record holds no attempts (see item).
func (b *Backend) stageAt(batch *pebbledb.Batch, q *queue, env backend.Envelope, delay time.Duration, deferred bool, line uint64, fresh bool) func() {
	seq := b.seq.Add(1)
	if line == 0 {
		line = seq
	}
	value := encodeEnvelope(make([]byte, 0, 64+len(env.Payload)), env, line)
	priority := uint8(min(int(env.Priority), q.Levels()))
	delay = backend.RoundUp(delay, b.granularity)
	if delay <= 0 {
		batch.Set(readyKey(q.name, priority, seq), value, nil)
		it := &item{seq: seq, priority: priority, id: env.ID, ckey: env.Key, line: line, fresh: fresh}
		return func() {
			it.value = b.hot.keep(value)
			q.Push(it)
		}
	}
	due := time.Now().Add(delay)
	key := delayedKey(due, seq, deferred, priority, q.name)
	batch.Set(key, value, nil)
	dl := &delayed{due: due, key: key, q: q, id: env.ID, priority: priority, deferred: deferred, ckey: env.Key, line: line, fresh: fresh}
	return func() { b.delays.add(dl) }
}

// errStillWriting is wrapped by commit's error when ctx ended while the write was in
// flight: it may still land.
var errStillWriting = errors.New("the write may still complete")

// commit commits batch and then runs apply, or onFail when the commit fails. When ctx
// ends first, commit returns ctx's error at once and the commit finishes on its own
// (apply or onFail still run): a deadline is kept whatever the disk does, and the
// in-memory index always follows what is on disk.
func (b *Backend) commit(ctx context.Context, batch *pebbledb.Batch, opts *pebbledb.WriteOptions, op, queue string, apply, onFail func()) error {
	run := func() error {
		if b.beforeCommit != nil {
			b.beforeCommit(op)
		}
		err := b.apply(batch, opts)
		batch.Close()
		if err != nil {
			if onFail != nil {
				onFail()
			}
			return &backend.TransportError{Op: op, Queue: queue, Err: err}
		}
		if apply != nil {
			apply()
		}
		return nil
	}
	if ctx.Done() == nil {
		return run()
	}
	if err := ctx.Err(); err != nil {
		batch.Close()
		if onFail != nil {
			onFail()
		}
		return err
	}
	b.ops.Add(1) // the caller is inside an operation, so the count is above zero
	done := make(chan error, 1)
	go func() {
		defer b.ops.Done()
		done <- run()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s to %q: %w: %w", op, queue, errStillWriting, ctx.Err())
	}
}

// apply commits batch, turning Pebble's fatal report of a failed commit into
// ErrStoreFailed: after it every operation fails until the directory is reopened.
func (b *Backend) apply(batch *pebbledb.Batch, opts *pebbledb.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = b.fail(fmt.Errorf("%w: %s: %s", ErrStoreFailed, b.dir, f.msg))
		}
	}()
	return batch.Commit(opts)
}

// fail marks the store failed with err (the first error wins, and is returned): every
// later operation fails with it and every stream ends with it, so that no job is handed
// out whose settle cannot be written. The process must reopen the directory (restart)
// to continue: a Pebble that reported a fatal error is not closed cleanly.
func (b *Backend) fail(err error) error {
	b.failed.CompareAndSwap(nil, &err)
	b.failOnce.Do(func() { close(b.failCh) })
	return *b.failed.Load()
}

// failure returns the error that broke the store, or nil.
func (b *Backend) failure() error {
	if p := b.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// compactDrainedAfter is how many settles a queue sees before, once it is empty, its
// range is compacted.
const compactDrainedAfter = 100_000

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
	return d.end(ctx, "ack", backend.JobSucceeded, "", children, run)
}

// Cancel settles the delivery as cancelled (see backend.CancellableDelivery): the job
// leaves its queue and its record says cancelled with reason, in one batch, as an ack
// without children.
func (d *delivery) Cancel(ctx context.Context, reason string, run *backend.JobRecord) error {
	return d.end(ctx, "cancel", backend.JobCancelled, reason, nil, run)
}

// end settles the delivery as finished, in state with reason, publishing children in
// the same batch: what an ack and a cancel share.
func (d *delivery) end(ctx context.Context, op string, state backend.JobState, reason string, children []backend.Publication, run *backend.JobRecord) error {
	b := d.b
	return d.settle(ctx, op, false, func(batch *pebbledb.Batch) (func(), func(), error) {
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
		n := b.stageSettleRecord(batch, d, state, reason, ids, run)
		applyUniq := b.stageUniqFinish(batch, d.it.id, time.Now())
		applyEnded, undoEnded := b.stageEnded(batch, d.result(state, reason, run))
		return func() {
			applyUniq()
			applyChildren()
			b.ids.remove(d.it.id)
			d.q.leaveKey(d.it.id)
			b.recs.add(n, b.records.maxCount)
			applyEnded()
		}, func() { undoEnded(); undo() }, nil
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
		// The next attempt of the job keeps its place in its key's line; under another
		// id or queue it is a job of its own, whose place is new.
		old := d.it.id
		line, moved := d.it.line, next.ID != old || q != d.q
		if moved {
			line = 0
		}
		apply := b.stageAt(batch, q, next, delay, deferred, line, false)
		state := backend.JobRetrying
		if deferred {
			state = backend.JobDeferred
		}
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
			if moved {
				d.q.leaveKey(old)
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
		applyEnded, undoEnded := b.stageEnded(batch, d.result(backend.JobDead, reason, run))
		return func() {
			applyUniq()
			b.ids.remove(d.it.id)
			d.q.leaveKey(d.it.id)
			b.recs.add(n, b.records.maxCount)
			applyEnded()
		}, undoEnded, nil
	})
}

// result is how the delivered job, ending in state with reason after run (may be nil),
// reads to the jobs that await it.
func (d *delivery) result(state backend.JobState, reason string, run *backend.JobRecord) backend.AwaitResult {
	var out []byte
	var truncated bool
	if run != nil {
		out, truncated = run.Output, run.OutputTruncated
	}
	return resultOf(d.env.ID, d.q.name, state, reason, out, truncated)
}
