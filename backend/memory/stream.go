package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/stream"
)

// Level and Requeue make a message a ready item of the stream core.
func (m *message) Level() int { return int(m.env.Priority) }

// Requeue marks a message that goes back to its queue as redelivered.
func (m *message) Requeue() { m.redelivered = true }

// ID is the job's id, for the queue's key gate.
func (m *message) ID() string { return m.env.ID }

// Key is the job's concurrency key.
func (m *message) Key() string { return m.env.Key }

// deliver makes the delivery of a message a stream of q took.
func (b *Backend) deliver(q *queue, c *stream.Claim[*message]) (backend.Delivery, error) {
	return &delivery{b: b, q: q, c: c, m: c.Item(), redelivered: c.Item().redelivered}, nil
}

var (
	_ backend.CancellableDelivery = (*delivery)(nil)
	_ backend.AtomicDelivery      = (*delivery)(nil)
)

// delivery is a message handed to a consumer.
type delivery struct {
	b           *Backend
	q           *queue
	c           *stream.Claim[*message]
	m           *message // shared with later deliveries of the same message: read only
	redelivered bool
}

func (d *delivery) Envelope() (backend.Envelope, error) {
	d.c.Received() // from here on the queue counts it unacknowledged, not on offer
	env := d.m.env
	env.Redelivered = d.redelivered
	return env, d.m.decodeErr
}

// begin moves the delivery into its settle, or says why it cannot be settled.
func (d *delivery) begin() error {
	if d.b.queues.IsClosed() {
		return backend.ErrShutDown
	}
	return d.c.Begin()
}

// finishLocked completes a settle: the delivery leaves the stream, freeing a prefetch
// slot once the caller, having released the queue's lock, calls d.c.Wake. final says
// the job is done (acknowledged or dead-lettered), not put back; cancelled counts a
// cancelled settle as such as well. The queue's lock is held.
func (d *delivery) finishLocked(dead string, final, cancelled bool) {
	q := d.q
	d.c.FinishLocked()
	q.release(d.m)
	if final {
		q.uniqFinished(d.m.env.ID, time.Now())
	}
	if dead != "" {
		q.dead = append(q.dead, deadLetter{m: d.m, reason: dead, at: time.Now()})
	} else {
		q.acked++
	}
	if cancelled {
		q.cancelled++
	}
}

// end completes a final settle that publishes nothing, and tells the job's waiters how
// it ended. b.w.mu is held.
func (d *delivery) end(state backend.JobState, reason string, rec *backend.JobRecord) {
	d.q.Lock()
	dead := ""
	if state == backend.JobDead {
		dead = reason
	}
	d.finishLocked(dead, true, state == backend.JobCancelled)
	d.q.Unlock()
	d.c.Wake()
	d.b.endedLocked(d.result(state, reason, rec))
}

// result is how the job ended, for its waiters.
func (d *delivery) result(state backend.JobState, reason string, rec *backend.JobRecord) backend.AwaitResult {
	r := backend.AwaitResult{ID: d.m.env.ID, Queue: d.m.env.Queue, State: state, Reason: reason}
	if rec != nil {
		r.Output = rec.Output
	}
	return r
}

func (d *delivery) Ack(ctx context.Context) error { return d.AckWith(ctx, nil, nil) }

// AckWith acknowledges the delivery and publishes children in one step, under the
// locks of the delivery's queue and every child's: a consumer sees all of them or
// none. A child whose id its queue holds is not published again. Of rec only the
// output is kept, for the job's waiters: the backend keeps no records.
func (d *delivery) AckWith(ctx context.Context, children []backend.Publication, rec *backend.JobRecord) error {
	if err := d.begin(); err != nil {
		return err
	}
	b := d.b
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if len(children) == 0 {
		d.end(backend.JobSucceeded, "", rec)
		return nil
	}
	delays, err := b.checkPublications(children)
	if err != nil {
		d.c.Reopen()
		return err
	}
	names := []string{d.q.name}
	for i, c := range children {
		if _, err := b.queues.Lookup(c.Envelope.Queue); err != nil {
			d.c.Reopen()
			return fmt.Errorf("publishing child job %d of %d to queue %q: %w", i+1, len(children), c.Envelope.Queue, err)
		}
		names = append(names, c.Envelope.Queue)
	}
	qs, unlock, err := b.lockQueues(names)
	if err != nil {
		d.c.Reopen()
		return err
	}
	for i, c := range children {
		b.putNewLocked(qs[c.Envelope.Queue], c.Envelope, delays[i], nil)
	}
	d.finishLocked("", true, false)
	unlock()
	d.c.Wake()
	b.endedLocked(d.result(backend.JobSucceeded, "", rec))
	return nil
}

func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(next, delay, false)
}

func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(next, delay, true)
}

// RetryWith is Retry: the backend keeps no records.
func (d *delivery) RetryWith(ctx context.Context, next backend.Envelope, delay time.Duration, rec *backend.JobRecord) error {
	return d.republish(next, delay, false)
}

// DeferWith is Defer: the backend keeps no records.
func (d *delivery) DeferWith(ctx context.Context, next backend.Envelope, delay time.Duration, rec *backend.JobRecord) error {
	return d.republish(next, delay, true)
}

// republish puts next, usually this delivery's own job, back for later, then settles.
// It is no repeat publish: the queue holds the job only until this settle finishes.
// The results the job awaited go with it.
func (d *delivery) republish(next backend.Envelope, delay time.Duration, deferred bool) error {
	if err := d.begin(); err != nil {
		return err
	}
	d.b.w.mu.Lock()
	defer d.b.w.mu.Unlock()
	m := &message{env: next.Clone()}
	if next.ID == d.m.env.ID {
		m.awaited = d.m.awaited
	}
	if err := d.b.enqueue(m, delay, deferred, false); err != nil {
		// The delivery stays unacknowledged, or goes back to the queue if its stream
		// ended meanwhile.
		d.c.Reopen()
		return err
	}
	d.q.Lock()
	if next.ID != d.m.env.ID {
		d.q.uniqRenamed(d.m.env.ID, next.ID)
	}
	d.finishLocked("", false, false)
	d.q.Unlock()
	d.c.Wake()
	return nil
}

func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.DeadLetterWith(ctx, reason, nil)
}

// DeadLetterWith is DeadLetter; of rec only the output is kept, for the job's waiters.
func (d *delivery) DeadLetterWith(ctx context.Context, reason string, rec *backend.JobRecord) error {
	if err := d.begin(); err != nil {
		return err
	}
	if reason == "" {
		reason = "dead-lettered without a reason"
	}
	d.b.w.mu.Lock()
	defer d.b.w.mu.Unlock()
	d.end(backend.JobDead, reason, rec)
	return nil
}

// Cancel settles the delivery as cancelled (backend.CancellableDelivery): the job
// leaves its queue, counted as acknowledged and as cancelled, and its waiters see it
// cancelled with reason. The memory backend keeps no job records, so rec is not kept.
func (d *delivery) Cancel(ctx context.Context, reason string, rec *backend.JobRecord) error {
	if err := d.begin(); err != nil {
		return err
	}
	d.b.w.mu.Lock()
	defer d.b.w.mu.Unlock()
	d.end(backend.JobCancelled, reason, rec)
	return nil
}
