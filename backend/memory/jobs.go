package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

var _ backend.JobController = (*Backend)(nil)

// where a job was found by find.
type where int

const (
	nowhere where = iota
	ready
	held
	dead
)

// find looks for the job id in every queue, and calls fn with its queue locked and
// where it is, returning fn's error. A job no queue holds (a job taken by a consumer
// is not found: the backend keeps nothing of it but the delivery) is ErrNotFound.
func (b *Backend) find(id string, fn func(q *queue, w where) error) error {
	qs, err := b.queues.Snapshot()
	if err != nil {
		return err
	}
	for _, q := range qs {
		q.Lock()
		w := q.where(id)
		var err error
		if w != nowhere {
			err = fn(q, w)
		}
		q.Unlock()
		if w != nowhere {
			return err
		}
	}
	return notHeld(id)
}

// where says where the queue holds the job id. the queue's lock is held.
func (q *queue) where(id string) where {
	for m := range q.All() {
		if m.env.ID == id {
			return ready
		}
	}
	for _, h := range q.held {
		if h.m.env.ID == id {
			return held
		}
	}
	if slices.ContainsFunc(q.dead, func(d deadLetter) bool { return d.m.env.ID == id }) {
		return dead
	}
	return nowhere
}

// unready removes the ready job id. the queue's lock is held.
func (q *queue) unready(id string) {
	if m, ok := q.Remove(func(m *message) bool { return m.env.ID == id }); ok {
		q.release(m)
	}
}

// unwait takes the waiting job id off the queue: w says where it waits, ready or held
// for its delay. The queue's lock is held.
func (q *queue) unwait(id string, w where) {
	if w == ready {
		q.unready(id)
		return
	}
	q.release(q.unhold(id))
}

// unhold stops the timer of the held job id and returns its message. the queue's lock is held.
func (q *queue) unhold(id string) *message {
	for t, h := range q.held {
		if h.m.env.ID == id {
			t.Stop()
			delete(q.held, t)
			return h.m
		}
	}
	return nil
}

func notHeld(id string) error {
	return fmt.Errorf("job %q: no queue holds it waiting (running, finished, or never enqueued here): %w", id, backend.ErrNotFound)
}

// CancelJob removes a job that waits: ready, held for its delay, or waiting for other
// jobs. Its waiters see it cancelled.
func (b *Backend) CancelJob(ctx context.Context, id string) error {
	return b.endWaiting(id, "cancelled by an operator", func(q *queue, w where) error {
		if w == dead {
			return fmt.Errorf("job %q of queue %q is a dead letter: delete it or retry it: %w", id, q.name, backend.ErrJobState)
		}
		q.unwait(id, w)
		// A cancel ends the job: its unique key's hold runs from now, as after a finish.
		q.uniqFinished(id, time.Now())
		return nil
	})
}

// endWaiting ends the waiting job id with reason: one that waits for other jobs is
// cancelled; for one a queue holds, fn does the queue's part and, unless it failed or
// the job is a dead letter (ended already), its waiters see it cancelled.
func (b *Backend) endWaiting(id, reason string, fn func(q *queue, w where) error) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if wt, ok := b.w.waiters[id]; ok {
		b.cancelWaiterLocked(wt, reason)
		return nil
	}
	var name string
	var was where
	err := b.find(id, func(q *queue, w where) error {
		name, was = q.name, w
		return fn(q, w)
	})
	if err == nil && was != dead {
		b.endedLocked(backend.AwaitResult{ID: id, Queue: name, State: backend.JobCancelled, Reason: reason})
	}
	return err
}

// RetryJobNow makes a held job ready now, or replays a dead letter.
func (b *Backend) RetryJobNow(ctx context.Context, id string) error {
	var replay string
	err := b.find(id, func(q *queue, w where) error {
		switch w {
		case held:
			q.PushBack(q.unhold(id))
		case dead:
			replay = q.name
		default:
			return fmt.Errorf("job %q of queue %q is pending already: %w", id, q.name, backend.ErrJobState)
		}
		return nil
	})
	if err == nil && replay != "" {
		return b.ReplayDeadLetter(ctx, replay, id)
	}
	return err
}

// DeleteJob removes a waiting job or a dead letter; the waiters of a waiting one see
// it cancelled.
func (b *Backend) DeleteJob(ctx context.Context, id string) error {
	return b.endWaiting(id, "deleted by an operator", func(q *queue, w where) error {
		if w == dead {
			q.dead = slices.DeleteFunc(q.dead, func(d deadLetter) bool { return d.m.env.ID == id })
		} else {
			q.unwait(id, w)
		}
		// A deleted job holds no unique key (a dead letter's hold runs already).
		q.uniqFreed(id)
		return nil
	})
}

var _ backend.JobEnvelopeReader = (*Backend)(nil)

// JobEnvelope returns the envelope of a job the backend holds waiting or dead.
func (b *Backend) JobEnvelope(ctx context.Context, id string) (backend.Envelope, error) {
	var env backend.Envelope
	err := b.find(id, func(q *queue, w where) error {
		switch w {
		case ready:
			for m := range q.All() {
				if m.env.ID == id {
					env = m.env.Clone()
				}
			}
		case held:
			for _, h := range q.held {
				if h.m.env.ID == id {
					env = h.m.env.Clone()
				}
			}
		case dead:
			for _, d := range q.dead {
				if d.m.env.ID == id {
					env = d.m.env.Clone()
				}
			}
		}
		return nil
	})
	return env, err
}
