package memory

import (
	"context"
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

var _ backend.CancellableDelivery = (*delivery)(nil)

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

// finish completes a settle: the delivery leaves the stream, freeing a prefetch slot.
// final says the job is done (acknowledged or dead-lettered), not put back.
func (d *delivery) finish(dead string, final bool) { d.finishAs(dead, final, false) }

// finishAs is finish, counting a cancelled settle as such as well.
func (d *delivery) finishAs(dead string, final, cancelled bool) {
	q := d.q
	q.Lock()
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
	q.Unlock()
	d.c.Wake()
}

func (d *delivery) Ack(ctx context.Context) error {
	if err := d.begin(); err != nil {
		return err
	}
	d.finish("", true)
	return nil
}

func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(next, delay, false)
}

func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(next, delay, true)
}

// republish puts next, usually this delivery's own job, back for later, then settles.
// It is no repeat publish: the queue holds the job only until this settle finishes.
func (d *delivery) republish(next backend.Envelope, delay time.Duration, deferred bool) error {
	if err := d.begin(); err != nil {
		return err
	}
	if err := d.b.enqueue(&message{env: next.Clone()}, delay, deferred, false); err != nil {
		// The delivery stays unacknowledged, or goes back to the queue if its stream
		// ended meanwhile.
		d.c.Reopen()
		return err
	}
	if next.ID != d.m.env.ID {
		d.q.Lock()
		d.q.uniqRenamed(d.m.env.ID, next.ID)
		d.q.Unlock()
	}
	d.finish("", false)
	return nil
}

func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	if err := d.begin(); err != nil {
		return err
	}
	if reason == "" {
		reason = "dead-lettered without a reason"
	}
	d.finish(reason, true)
	return nil
}

// Cancel settles the delivery as cancelled (backend.CancellableDelivery): the job
// leaves its queue, counted as acknowledged and as cancelled. The memory backend keeps
// no job records, so reason and rec are not kept.
func (d *delivery) Cancel(ctx context.Context, reason string, rec *backend.JobRecord) error {
	if err := d.begin(); err != nil {
		return err
	}
	d.finishAs("", true, true)
	return nil
}
