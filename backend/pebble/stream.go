package pebble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/wasmjobs/wasmjobs/backend"
)

// stream is one consumer of a queue. As in the memory backend, a goroutine hands out
// deliveries one at a time through an unbuffered channel, so a job is claimed only when
// a consumer takes it.
type stream struct {
	b        *Backend
	q        *queue
	ctx      context.Context
	prefetch int
	ch       chan backend.Delivery
	wake     chan struct{} // buffered 1: something changed, look again
	stop     chan struct{} // closed by Drop
	dropOnce sync.Once
	finished chan struct{} // closed when run returns

	// guarded by q.mu
	inflight map[*delivery]struct{}
	ended    bool
	err      error
}

func (s *stream) Deliveries() <-chan backend.Delivery { return s.ch }

func (s *stream) Err() error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.err
}

func (s *stream) Drop() {
	s.dropOnce.Do(func() { close(s.stop) })
	<-s.finished
}

func (s *stream) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) run() {
	defer s.b.streams.Done()
	defer close(s.finished)
	defer close(s.ch)
	var d *delivery
	for {
		if d == nil {
			var err error
			if d, err = s.take(); err != nil {
				s.end(err)
				return
			}
		}
		var out chan<- backend.Delivery
		var wake <-chan struct{}
		if d != nil {
			out = s.ch
		} else {
			wake = s.wake
		}
		var err error
		select {
		case out <- d:
			d.received()
			d = nil
			continue
		case <-wake:
			continue
		case <-s.stop:
		case <-s.b.done:
			err = backend.ErrShutDown
		case <-s.b.failCh:
			err = s.b.failure()
		case <-s.ctx.Done():
			err = s.ctx.Err()
		}
		if d != nil {
			d.received() // no longer on offer: end puts it back
		}
		s.end(err)
		return
	}
}

// take claims the next job for offering, if prefetch allows one, and reads its value.
// A job whose value cannot be read is never handed out: it goes back to the front of
// its queue (it is still on disk, as far as anyone knows) and the store fails, which
// ends every stream; an error is returned then.
func (s *stream) take() (*delivery, error) {
	q := s.q
	if err := s.b.failure(); err != nil {
		return nil, err
	}
	q.mu.Lock()
	if len(s.inflight) >= s.prefetch {
		q.mu.Unlock()
		return nil, nil
	}
	it := q.pop()
	if it == nil {
		q.mu.Unlock()
		return nil, nil
	}
	d := &delivery{s: s, it: it, redelivered: it.redelivered}
	d.offered.Store(true)
	s.inflight[d] = struct{}{}
	s.b.ids.claim(it.id)
	q.unsettle++
	q.offering.Add(1)
	q.mu.Unlock()
	// Nobody else touches a claimed job's key, so it is read outside the lock.
	d.key = q.key(it)
	raw, err := s.b.get(d.key)
	if err != nil {
		// The index holds a job the store cannot give: the store is damaged or the
		// engine is failing. Handing the job out without its value would let the
		// worker dead-letter (and delete) a job nobody read.
		d.received()
		err = s.b.fail(fmt.Errorf("%w: %w: %s: reading job %s of queue %q (key %q): %v",
			ErrStoreFailed, ErrCorrupt, s.b.dir, it.id, q.name, d.key, err))
		s.b.log.Error("reading a ready job; the store is failed", "dir", s.b.dir, "queue", q.name, "job", it.id, "error", err)
		return nil, err // end puts the job back: it is in s.inflight, open
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

// end releases every unsettled delivery back to the index, oldest first at the front,
// and records why the stream ended. Nothing is written: the jobs never left the disk.
func (s *stream) end(err error) {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.ended, s.err = true, err
	delete(s.q.streams, s)
	var released []*delivery
	for d := range s.inflight {
		if d.state.CompareAndSwap(stateOpen, stateReleased) {
			released = append(released, d)
		}
	}
	// Pushed newest first, so that the oldest ends up at the front.
	slices.SortFunc(released, func(a, b *delivery) int { return cmp.Compare(a.it.seq, b.it.seq) })
	for i := len(released) - 1; i >= 0; i-- {
		d := released[i]
		delete(s.inflight, d)
		s.b.ids.unclaim(d.it.id)
		s.q.unsettle--
		s.q.pushFront(d.it)
	}
}

// compactDrainedAfter is how many settles a queue sees before, once it is empty, its
// range is compacted.
const compactDrainedAfter = 100_000

// Delivery states.
const (
	stateOpen int32 = iota
	stateSettling
	stateSettled
	stateReleased
)

// delivery is a job handed to a consumer.
type delivery struct {
	s           *stream
	it          *item
	key         []byte
	raw         []byte
	env         backend.Envelope
	decodeErr   error
	redelivered bool
	state       atomic.Int32
	offered     atomic.Bool // counted in q.offering
	orphaned    bool        // guarded by q.mu: see orphan
}

// received ends the delivery's time on offer, once: called by the stream after the
// send and by Envelope, whichever comes first, so that stats read by a consumer that
// has just received it never count it as pending.
func (d *delivery) received() {
	if d.offered.CompareAndSwap(true, false) {
		d.s.q.offering.Add(-1)
	}
}

func (d *delivery) Envelope() (backend.Envelope, error) {
	d.received()
	env := d.env.Clone()
	env.Redelivered = d.redelivered
	return env, d.decodeErr
}

// begin moves the delivery into its settle, or says why it cannot be settled.
func (d *delivery) begin() error {
	if d.state.CompareAndSwap(stateOpen, stateSettling) {
		return nil
	}
	if d.state.Load() == stateReleased {
		return backend.ErrStreamClosed
	}
	return backend.ErrAlreadySettled
}

// reopen undoes begin after a failed settle: the delivery stays unacknowledged, or goes
// back to the queue if its stream ended meanwhile.
func (d *delivery) reopen() {
	q := d.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !d.s.ended && !d.orphaned {
		d.state.Store(stateOpen)
		return
	}
	d.release()
}

// release puts the delivery's job back at the front of its queue. q.mu is held.
func (d *delivery) release() {
	q := d.s.q
	d.state.Store(stateReleased)
	delete(d.s.inflight, d)
	d.s.b.ids.unclaim(d.it.id)
	q.unsettle--
	q.pushFront(d.it)
	d.s.wakeUp()
}

// finish completes a settle: the delivery leaves the stream, freeing a prefetch slot.
func (d *delivery) finish(dead bool) {
	q := d.s.q
	q.mu.Lock()
	delete(d.s.inflight, d)
	q.unsettle--
	if dead {
		q.dead++
	}
	d.state.Store(stateSettled)
	q.deletes++
	drained := q.deletes >= compactDrainedAfter && q.nready == 0 && q.unsettle == 0
	if drained {
		q.deletes = 0
	}
	q.mu.Unlock()
	d.s.wakeUp()
	if drained {
		// The queue is empty after many settles: compact its ready range so that
		// the tombstones of the jobs that went through do not linger on disk.
		prefix := readyPrefix(q.name)
		d.s.b.compactLater(prefix, prefixEnd(prefix))
	}
}

// settle runs one settle as one batch: the job's ready key is deleted and stage adds
// the rest (the next attempt, the dead letter, children, the record). The batch is
// committed without its own fsync (see the package comment). Once committed, stage's
// apply runs; if the commit fails, its undo does and the delivery stays unsettled.
func (d *delivery) settle(ctx context.Context, op string, dead bool,
	stage func(batch *pebbledb.Batch) (apply, undo func(), err error)) error {
	b := d.s.b
	if err := b.enter(); err != nil {
		return err
	}
	defer b.ops.Done()
	if err := d.begin(); err != nil {
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
	err = b.commit(ctx, batch, pebbledb.NoSync, op, d.s.q.name, func() {
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
		d.orphan()
		return fmt.Errorf("%w: %w", backend.ErrSettleUnknown, err)
	}
	return err
}

// orphan marks a delivery whose settle's outcome is unknown to its consumer: if the
// settle's write fails (now or already), the job goes back to its queue.
func (d *delivery) orphan() {
	q := d.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	d.orphaned = true
	if d.state.Load() == stateOpen { // the write failed already: reopen ran
		d.release()
	}
}

func (d *delivery) Ack(ctx context.Context) error { return d.AckWith(ctx, nil, nil) }

// AckWith acknowledges the delivery and publishes children in the same batch, with the
// job's record (see backend.AtomicDelivery).
func (d *delivery) AckWith(ctx context.Context, children []backend.Publication, run *backend.JobRecord) error {
	b := d.s.b
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
	b := d.s.b
	return d.settle(ctx, op, false, func(batch *pebbledb.Batch) (func(), func(), error) {
		q, err := b.lookup(next.Queue)
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
	b := d.s.b
	return d.settle(ctx, "dead-letter", true, func(batch *pebbledb.Batch) (func(), func(), error) {
		raw := d.raw
		if raw == nil {
			// Never delete a key whose value was not read: the job would be lost.
			return nil, nil, fmt.Errorf("dead-lettering job %s of queue %q: its value was never read from %s", d.it.id, d.s.q.name, b.dir)
		}
		now := time.Now()
		batch.Set(deadKey(d.s.q.name, now, b.seq.Add(1)), encodeDead(nil, reason, now, raw), nil)
		n := b.stageSettleRecord(batch, d, backend.JobDead, reason, nil, run)
		applyUniq := b.stageUniqFinish(batch, d.it.id, now)
		return func() {
			applyUniq()
			b.ids.remove(d.it.id)
			b.recs.add(n, b.records.maxCount)
		}, nil, nil
	})
}
