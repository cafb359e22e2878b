package pebble

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// maxListScan bounds the records one ListJobs page reads: a filter that matches
// rarely (one queue of many, a rare state) returns a short page with a cursor rather
// than read the whole store in one request.
const maxListScan = 10_000

var (
	_ backend.JobLister     = (*Backend)(nil)
	_ backend.JobController = (*Backend)(nil)
)

// ListJobs lists the declared queue's jobs from their records, newest first (records
// are keyed by id, and ids sort by creation time). A page reads at most maxListScan
// records.
func (b *Backend) ListJobs(ctx context.Context, queue string, f backend.JobFilter) (backend.JobPage, error) {
	if _, err := b.queues.Lookup(queue); err != nil {
		return backend.JobPage{}, err
	}
	if err := b.enter(); err != nil {
		return backend.JobPage{}, err
	}
	defer b.ops.Done()
	limit := f.Limit
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	lower := []byte{kindRecord}
	upper := prefixEnd(lower)
	if f.Cursor != "" {
		upper = recordKey(f.Cursor)
	}
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return backend.JobPage{}, &backend.TransportError{Op: "list jobs", Queue: queue, Err: err}
	}
	defer it.Close()
	var page backend.JobPage
	scanned, last := 0, ""
	for valid := it.Last(); valid; valid = it.Prev() {
		if err := ctx.Err(); err != nil {
			return backend.JobPage{}, err
		}
		if len(page.Jobs) == limit || scanned == maxListScan {
			// One more exists: the next page starts below the last one read.
			page.Next = last
			break
		}
		id := string(it.Key()[1:])
		scanned, last = scanned+1, id
		v, err := it.ValueAndErr()
		if err != nil {
			return backend.JobPage{}, &backend.TransportError{Op: "list jobs", Queue: queue, Err: err}
		}
		rec, err := decodeRecord(v)
		if err != nil {
			return backend.JobPage{}, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
		}
		if rec.Queue != queue {
			continue
		}
		if !rec.State.Finished() && b.ids.claimed(rec.ID) {
			rec.State = backend.JobRunning
		}
		if f.State != "" && rec.State != f.State {
			continue
		}
		page.Jobs = append(page.Jobs, rec)
	}
	if err := it.Error(); err != nil {
		return backend.JobPage{}, &backend.TransportError{Op: "list jobs", Queue: queue, Err: err}
	}
	return page, nil
}

// CancelJob removes a job that waits (pending, delayed, deferred or retrying) and
// keeps its record as cancelled, in one synced write.
func (b *Backend) CancelJob(ctx context.Context, id string) error {
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		return err
	}
	if rec.State == backend.JobWaiting {
		_, _, err := b.CancelWaiting(ctx, id, "cancelled by an operator", false)
		return err
	}
	return b.removeWaiting(ctx, rec, false)
}

// RetryJobNow makes a job that waits for its time (retrying, delayed, deferred) due
// now, or replays a dead letter.
func (b *Backend) RetryJobNow(ctx context.Context, id string) error {
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		return err
	}
	switch rec.State {
	case backend.JobDead:
		return b.ReplayDeadLetter(ctx, rec.Queue, id)
	case backend.JobRetrying, backend.JobDelayed, backend.JobDeferred:
		x := &b.delays
		x.mu.Lock()
		defer x.mu.Unlock()
		for i, dl := range x.h {
			if dl.id == id {
				// The delay timer releases it at once, through the path every due
				// job takes.
				dl.due = time.Now()
				heap.Fix(&x.h, i)
				x.arm(0)
				return nil
			}
		}
		return fmt.Errorf("job %q of queue %q is being released already: %w", id, rec.Queue, backend.ErrJobState)
	}
	return fmt.Errorf("job %q of queue %q is %s: only a retrying, delayed, deferred or dead job can be retried now: %w", id, rec.Queue, rec.State, backend.ErrJobState)
}

// DeleteJob removes a job and its record: a waiting job is taken off its queue, a dead
// letter goes, a finished record is deleted. A running job is refused.
func (b *Backend) DeleteJob(ctx context.Context, id string) error {
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		return err
	}
	switch rec.State {
	case backend.JobRunning:
		return fmt.Errorf("job %q of queue %q is running: it can be deleted once it settles: %w", id, rec.Queue, backend.ErrJobState)
	case backend.JobSucceeded, backend.JobCancelled, backend.JobDead:
		return b.deleteFinished(ctx, id)
	case backend.JobWaiting:
		// Cancelled first, so that the jobs that await it see it end.
		if _, _, err := b.CancelWaiting(ctx, id, "deleted by an operator", false); err != nil {
			return err
		}
		return b.deleteFinished(ctx, id)
	}
	return b.removeWaiting(ctx, rec, true)
}

// deleteFinished deletes the record of a finished job (and a dead job's dead letter).
// It holds the id's reservation (idSet) from reading the record until the delete has
// landed or failed: a publish or replay of the id waits meanwhile, so the record deleted
// is the one read, never a fresh one written in between. It waits, with ctx, for a
// reservation already under way (a prune batch, another delete, a publish in flight),
// and then reads the record again: only an id held by a live job is refused.
func (b *Backend) deleteFinished(ctx context.Context, id string) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	owned, err := b.ids.reserve(ctx, id)
	if err != nil {
		return err
	}
	if !owned {
		return fmt.Errorf("job %q is waiting or running again (published anew): %w", id, backend.ErrJobState)
	}
	release := func() { b.ids.settle(id, false) }
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		release()
		return err
	}
	switch rec.State {
	case backend.JobSucceeded, backend.JobCancelled:
		batch := b.db.NewBatch()
		batch.Delete(recordKey(id), nil) // its by-time key goes at the next prune
		return b.commit(ctx, batch, pebbledb.Sync, "delete job", rec.Queue, release, release)
	case backend.JobDead:
		return b.deleteDead(ctx, rec, release)
	}
	release()
	return fmt.Errorf("job %q of queue %q is %s now: %w", id, rec.Queue, rec.State, backend.ErrJobState)
}

// deleteDead deletes a dead job's dead letter, if it is still there, and its record;
// it calls release once the write has landed or failed, or when it writes nothing.
func (b *Backend) deleteDead(ctx context.Context, rec backend.JobRecord, release func()) error {
	q, err := b.queues.Lookup(rec.Queue)
	if err != nil {
		release()
		return err
	}
	var key []byte
	err = b.scanDead(q.name, func(k, v []byte) (bool, error) {
		_, _, value, err := decodeDead(v)
		if err != nil {
			return false, fmt.Errorf("dead letter %q in %s: %w", k, b.dir, err)
		}
		if got, err := envelopeID(value); err == nil && got == rec.ID {
			key = append([]byte(nil), k...)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		release()
		return err
	}
	batch := b.db.NewBatch()
	batch.Delete(recordKey(rec.ID), nil)
	if key == nil {
		return b.commit(ctx, batch, pebbledb.Sync, "delete job", q.name, release, release)
	}
	// The same claim as a replay's: one of the two wins the dead letter.
	if _, busy := b.replaying.LoadOrStore(string(key), true); busy {
		batch.Close()
		release()
		return fmt.Errorf("dead letter %q of queue %q is being replayed or purged: %w", rec.ID, q.name, backend.ErrJobState)
	}
	unclaim := func() { b.replaying.Delete(string(key)); release() }
	if _, err := b.get(key); err != nil {
		batch.Close()
		unclaim()
		return fmt.Errorf("dead letter %q of queue %q: %w", rec.ID, q.name, backend.ErrNotFound)
	}
	batch.Delete(key, nil)
	return b.commit(ctx, batch, pebbledb.Sync, "delete job", q.name, func() {
		q.Lock()
		q.dead--
		q.Unlock()
		unclaim()
	}, unclaim)
}

// removeWaiting takes a waiting job off its queue's index and deletes its key, in one
// synced write with its record: deleted with del, else kept as cancelled. The index
// entry is taken first, under the queue's (or the delay index's) lock, so that no
// consumer or release can take the job meanwhile; a failed write puts it back.
func (b *Backend) removeWaiting(ctx context.Context, rec backend.JobRecord, del bool) error {
	return b.removeWaitingAs(ctx, rec, del, "cancelled by an operator")
}

// removeWaitingAs is removeWaiting, a cancel keeping reason in the record. The jobs
// that await the job see it cancelled (deleted, too).
func (b *Backend) removeWaitingAs(ctx context.Context, rec backend.JobRecord, del bool, reason string) error {
	q, err := b.queues.Lookup(rec.Queue)
	if err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	state := rec.State
	batch := b.db.NewBatch()
	now := time.Now()
	finished := 0
	if del {
		batch.Delete(recordKey(rec.ID), nil)
	} else {
		rec.State, rec.Reason, rec.FinishedAt, rec.UpdatedAt = backend.JobCancelled, reason, now, now
		batch.Set(recordKey(rec.ID), encodeRecord(&rec), nil)
		batch.Set(byTimeKey(now, rec.ID), nil, nil)
		finished = 1
	}
	switch state {
	case backend.JobPending, backend.JobDelayed, backend.JobDeferred, backend.JobRetrying:
	default:
		batch.Close()
		return fmt.Errorf("job %q of queue %q is %s: only a waiting job (pending, delayed, deferred, retrying) can be cancelled: %w", rec.ID, q.name, state, backend.ErrJobState)
	}
	// The job's unique key, in the same batch: a cancel ends the job, so its hold runs
	// unique_for from now as after a finish; a deleted job holds no key.
	var uniqDone func()
	if del {
		uniqDone = b.stageUniqFree(batch, rec.ID)
	} else {
		uniqDone = b.stageUniqFinish(batch, rec.ID, now)
	}
	var endedDone, endedUndo func()
	done := func() {
		b.ids.remove(rec.ID)
		q.leaveKey(rec.ID)
		b.recs.add(finished, b.records.maxCount)
		uniqDone()
		endedDone()
	}
	// A retry without a delay is ready at once: look in both indexes.
	if it := q.take(rec.ID); it != nil {
		b.hot.take(it) // it leaves the index; put back, it reads its value from the store
		batch.Delete(q.key(it), nil)
		endedDone, endedUndo = b.stageEnded(batch, resultOf(rec.ID, q.name, backend.JobCancelled, reason, nil, false))
		return b.commit(ctx, batch, pebbledb.Sync, "cancel job", q.name, done, func() { endedUndo(); q.Push(it) })
	}
	dl := b.delays.take(rec.ID)
	if dl == nil {
		batch.Close()
		return fmt.Errorf("job %q of queue %q is no longer waiting (a consumer took it, or it is being released): %w", rec.ID, q.name, backend.ErrJobState)
	}
	batch.Delete(dl.key, nil)
	endedDone, endedUndo = b.stageEnded(batch, resultOf(rec.ID, q.name, backend.JobCancelled, reason, nil, false))
	return b.commit(ctx, batch, pebbledb.Sync, "cancel job", q.name, func() {
		q.Lock()
		if dl.deferred {
			q.deferred--
		} else {
			q.delayed--
		}
		q.Unlock()
		done()
	}, func() { endedUndo(); b.delays.putBack(dl) })
}

// leaveKey frees the place of the job id, which has ended, in its concurrency key's
// line.
func (q *queue) leaveKey(id string) {
	q.Lock()
	defer q.Unlock()
	q.LeaveKey(id)
}

// take removes the ready job id from the index, or returns nil.
func (q *queue) take(id string) *item {
	q.Lock()
	defer q.Unlock()
	it, _ := q.Remove(func(it *item) bool { return it.id == id })
	return it
}

// take removes the delayed job id from the heap, or returns nil. Its queue's counts
// stay until the caller's write commits.
func (x *delayIndex) take(id string) *delayed {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, dl := range x.h {
		if dl.id == id {
			heap.Remove(&x.h, i)
			return dl
		}
	}
	return nil
}

// putBack returns a delayed job that take removed to the heap (its counts never left).
func (x *delayIndex) putBack(dl *delayed) {
	x.mu.Lock()
	defer x.mu.Unlock()
	heap.Push(&x.h, dl)
	if x.h[0] == dl {
		x.arm(max(time.Until(dl.due), 0))
	}
}

var _ backend.JobEnvelopeReader = (*Backend)(nil)

// JobEnvelope returns the envelope of a job that waits or is dead, read from its key.
func (b *Backend) JobEnvelope(ctx context.Context, id string) (backend.Envelope, error) {
	rec, err := b.JobRecord(ctx, id)
	if err != nil {
		return backend.Envelope{}, err
	}
	q, err := b.queues.Lookup(rec.Queue)
	if err != nil {
		return backend.Envelope{}, err
	}
	if err := b.enter(); err != nil {
		return backend.Envelope{}, err
	}
	defer b.ops.Done()
	var key []byte
	switch rec.State {
	case backend.JobDead:
		err = b.scanDead(q.name, func(k, v []byte) (bool, error) {
			_, _, value, err := decodeDead(v)
			if err != nil {
				return false, fmt.Errorf("dead letter %q in %s: %w", k, b.dir, err)
			}
			if got, err := envelopeID(value); err == nil && got == id {
				key = append([]byte(nil), k...)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return backend.Envelope{}, err
		}
	case backend.JobPending, backend.JobDelayed, backend.JobDeferred, backend.JobRetrying:
		key = q.keyOf(id)
		if key == nil {
			key = b.delays.keyOf(id)
		}
	case backend.JobWaiting:
		v, err := b.get(waitingKey(id))
		if err != nil {
			return backend.Envelope{}, fmt.Errorf("job %q of queue %q left its place while it was read: %w", id, q.name, backend.ErrNotFound)
		}
		raw, _, err := decodeWaiter(v)
		if err != nil {
			return backend.Envelope{}, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
		}
		env, err := decodeEnvelope(raw)
		if err != nil {
			return backend.Envelope{}, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
		}
		return env, nil
	}
	if key == nil {
		return backend.Envelope{}, fmt.Errorf("job %q of queue %q is %s: its payload is not kept: %w", id, q.name, rec.State, backend.ErrNotFound)
	}
	v, err := b.get(key)
	if err != nil {
		return backend.Envelope{}, fmt.Errorf("job %q of queue %q left its place while it was read: %w", id, q.name, backend.ErrNotFound)
	}
	if rec.State == backend.JobDead {
		if _, _, v, err = decodeDead(v); err != nil {
			return backend.Envelope{}, fmt.Errorf("dead letter %q in %s: %w", id, b.dir, err)
		}
	}
	env, err := decodeEnvelope(v)
	if err != nil {
		return backend.Envelope{}, fmt.Errorf("job %q in %s: %w", id, b.dir, err)
	}
	return env, nil
}

// keyOf returns the key of the ready job id, or nil.
func (q *queue) keyOf(id string) []byte {
	q.Lock()
	defer q.Unlock()
	for it := range q.All() {
		if it.id == id {
			return q.key(it)
		}
	}
	return nil
}

// keyOf returns the key of the delayed job id, or nil.
func (x *delayIndex) keyOf(id string) []byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, dl := range x.h {
		if dl.id == id {
			return dl.key
		}
	}
	return nil
}
