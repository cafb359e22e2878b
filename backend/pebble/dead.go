package pebble

import (
	"container/heap"
	"context"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

func heapInit(h *delayHeap) { heap.Init(h) }

// DeadLetters lists up to limit dead letters of the declared queue, oldest first;
// limit <= 0 lists all.
func (b *Backend) DeadLetters(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	if _, err := b.queues.Lookup(queue); err != nil {
		return nil, err
	}
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	var out []backend.DeadLetter
	err := b.scanDead(queue, func(key, value []byte) (bool, error) {
		reason, at, raw, err := decodeDead(value)
		if err != nil {
			return false, fmt.Errorf("dead letter %q in %s: %w", key, b.dir, err)
		}
		env, derr := decodeEnvelope(raw)
		if derr != nil {
			env.Payload = append([]byte(nil), raw...)
		}
		out = append(out, backend.DeadLetter{Envelope: env, Reason: reason, At: at})
		return limit <= 0 || len(out) < limit, nil
	})
	return out, err
}

// scanDead calls fn on the dead letters of queue in order while it returns true.
func (b *Backend) scanDead(queue string, fn func(key, value []byte) (bool, error)) error {
	prefix := deadPrefix(queue)
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return &backend.TransportError{Op: "dead letters", Queue: queue, Err: err}
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return &backend.TransportError{Op: "dead letters", Queue: queue, Err: err}
		}
		more, err := fn(it.Key(), v)
		if err != nil || !more {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return &backend.TransportError{Op: "dead letters", Queue: queue, Err: err}
	}
	return nil
}

// ReplayDeadLetter puts the dead letter with job id id back on its queue as a new
// job (attempt 1, no reason, no defers, one replay more: backend.Replayed), in one
// synced batch.
func (b *Backend) ReplayDeadLetter(ctx context.Context, queue, id string) error {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	var key, raw []byte
	err = b.scanDead(queue, func(k, v []byte) (bool, error) {
		_, _, value, err := decodeDead(v)
		if err != nil {
			return false, fmt.Errorf("dead letter %q in %s: %w", k, b.dir, err)
		}
		if got, err := envelopeID(value); err == nil && got == id {
			key, raw = append([]byte(nil), k...), append([]byte(nil), value...)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
	}
	env, err := decodeEnvelope(raw)
	if err != nil {
		return fmt.Errorf("replaying dead letter %q of queue %q: %w", id, queue, err)
	}
	// Claim the dead letter's key, then check it is still there: two replays of one
	// id would otherwise both delete it and both count it off q.dead.
	if _, busy := b.replaying.LoadOrStore(string(key), true); busy {
		return fmt.Errorf("dead letter %q of queue %q: being replayed, deleted or purged already: %w", id, queue, backend.ErrNotFound)
	}
	defer b.replaying.Delete(string(key))
	if _, err := b.get(key); err != nil {
		return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
	}
	owned, err := b.ids.reserve(ctx, env.ID)
	if err != nil {
		return err
	}
	backend.Replayed(ctx, &env)
	batch := b.db.NewBatch()
	batch.Delete(key, nil)
	apply := func() {}
	if owned { // else a job with this id is held already: the dead letter just goes
		apply = b.stageAt(batch, q, env, 0, false, 0, false)
		// The new record keeps the earlier runs' attempts: the job's page lists them.
		b.stageRecordAttempts(batch, env, 0, false, b.priorAttempts(env.ID))
	}
	return b.commit(ctx, batch, pebbledb.Sync, "replay", queue, func() {
		if owned {
			b.ids.settle(env.ID, true)
		}
		q.Lock()
		q.dead--
		q.Unlock()
		apply()
	}, func() {
		if owned {
			b.ids.settle(env.ID, false)
		}
	})
}

// PurgeDeadLetters deletes the dead letters the declared queue holds when it starts,
// and reports how many it deleted: exactly those, a batch of at most purgeBatch at a
// time. Each key is claimed the way a replay claims it (b.replaying) and read again
// before its delete is staged, so that a dead letter replayed or deleted meanwhile is
// neither deleted nor counted; one written after the purge began sorts past the last
// key it found and stays (a range delete of the prefix deleted it uncounted). The range
// is compacted in the background, so that the space is given back. With an error, the
// count is of the batches written before it (a batch whose write was cut off by ctx may
// still land, uncounted).
func (b *Backend) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return 0, err
	}
	if err := b.enter(); err != nil {
		return 0, err
	}
	defer b.ops.Done()
	prefix := deadPrefix(queue)
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, &backend.TransportError{Op: "purge dead letters", Queue: queue, Err: err}
	}
	var upper []byte // just past the last dead letter there now
	if it.Last() {
		upper = append(append([]byte(nil), it.Key()...), 0)
	}
	ierr := it.Error()
	it.Close()
	if ierr != nil {
		return 0, &backend.TransportError{Op: "purge dead letters", Queue: queue, Err: ierr}
	}
	total := 0
	for from := prefix; upper != nil && from != nil; {
		var n int
		n, from, err = b.purgeDeadBatch(ctx, q, from, upper)
		total += n
		if err != nil {
			return total, err
		}
	}
	if total > 0 {
		b.compactLater(prefix, prefixEnd(prefix))
	}
	return total, nil
}

// purgeBatch is how many dead letters one write of a purge deletes at most.
const purgeBatch = 1024

// purgeDeadBatch deletes up to purgeBatch dead letters of q in [from, upper) and returns
// how many, and where the next batch starts (nil when none is left). The claims on the
// keys end once the write has landed or failed, not before: a replay that claimed one
// while the write was still in flight would find it and count it off q.dead again.
func (b *Backend) purgeDeadBatch(ctx context.Context, q *queue, from, upper []byte) (int, []byte, error) {
	it, err := b.db.NewIter(&pebbledb.IterOptions{LowerBound: from, UpperBound: upper})
	if err != nil {
		return 0, nil, &backend.TransportError{Op: "purge dead letters", Queue: q.name, Err: err}
	}
	var claimed []string
	release := func() {
		for _, k := range claimed {
			b.replaying.Delete(k)
		}
	}
	batch := b.db.NewBatch()
	var next []byte
	seen := 0
	for valid := it.First(); valid; valid = it.Next() {
		if seen == purgeBatch {
			next = append([]byte(nil), it.Key()...)
			break
		}
		seen++
		k := string(it.Key())
		if _, busy := b.replaying.LoadOrStore(k, true); busy {
			continue // being replayed or deleted: not the purge's
		}
		claimed = append(claimed, k)
		if _, err := b.get([]byte(k)); errors.Is(err, pebbledb.ErrNotFound) {
			continue // replayed or deleted since the iterator was opened
		} else if err != nil {
			it.Close()
			batch.Close()
			release()
			return 0, nil, &backend.TransportError{Op: "purge dead letters", Queue: q.name, Err: err}
		}
		batch.Delete([]byte(k), nil)
	}
	ierr := it.Error()
	it.Close()
	n := int(batch.Count())
	if ierr != nil || n == 0 {
		batch.Close()
		release()
		if ierr != nil {
			return 0, nil, &backend.TransportError{Op: "purge dead letters", Queue: q.name, Err: ierr}
		}
		return 0, next, nil
	}
	err = b.commit(ctx, batch, pebbledb.Sync, "purge dead letters", q.name, func() {
		q.Lock()
		q.dead -= n
		q.Unlock()
		release()
	}, release)
	if err != nil {
		return 0, nil, err
	}
	return n, next, nil
}

// compactLater compacts [start, end) in the background, so that a drained range's
// tombstones do not linger.
func (b *Backend) compactLater(start, end []byte) {
	if b.enter() != nil {
		return
	}
	go func() {
		defer b.ops.Done()
		if err := b.db.Compact(b.closing, start, end, false); err != nil {
			b.log.Warn("compacting a purged range", "dir", b.dir, "error", err)
		}
	}()
}

// QueueStats counts the declared queue's jobs by state.
func (b *Backend) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	q, err := b.queues.Lookup(queue)
	if err != nil {
		return backend.QueueStats{}, err
	}
	waiting := b.waitingCount(queue)
	q.Lock()
	defer q.Unlock()
	pending, unacked := q.Counts()
	return backend.QueueStats{
		Waiting:    waiting,
		Pending:    pending,
		Unacked:    unacked,
		Delayed:    q.delayed,
		Deferred:   q.deferred,
		Dead:       q.dead,
		KeyWaiting: q.KeyWaiting(),
	}, nil
}
