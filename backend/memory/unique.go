package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

var _ backend.UniquePublisher = (*Backend)(nil)

// uniqEntry is a unique key of a queue and the job that holds it.
type uniqEntry struct {
	key string
	id  string
	For time.Duration
	// until is when the key is freed; zero while its job is not finished.
	until time.Time
}

// held reports whether the key still holds at now.
func (e *uniqEntry) held(now time.Time) bool { return e.until.IsZero() || now.Before(e.until) }

// uniqSweepMin is the fewest entries a queue keeps before it sweeps expired ones.
const uniqSweepMin = 64

// PublishUnique publishes each publication whose key its queue does not hold, one by
// one: the check of the key and the publish happen under the queue's lock, so that of
// concurrent publications of one key exactly one is queued. A publication without a
// key is published as by Publish.
func (b *Backend) PublishUnique(ctx context.Context, pubs []backend.UniquePublication) ([]backend.UniqueResult, error) {
	for _, p := range pubs {
		if _, err := b.queues.Lookup(p.Envelope.Queue); err != nil {
			return nil, err
		}
		if err := backend.CheckDelay(p.Delay, backend.MaxDelay); err != nil {
			return nil, fmt.Errorf("job %s for queue %q: %w", p.Envelope.ID, p.Envelope.Queue, err)
		}
	}
	out := make([]backend.UniqueResult, 0, len(pubs))
	for _, p := range pubs {
		res, err := b.publishUnique(p)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

func (b *Backend) publishUnique(p backend.UniquePublication) (backend.UniqueResult, error) {
	m := &message{env: p.Envelope.Clone()}
	if p.Key == "" {
		return backend.UniqueResult{ID: m.env.ID}, b.enqueue(m, p.Delay, false, true)
	}
	var res backend.UniqueResult
	err := b.enqueueIf(m, p.Delay, false, func(q *queue) bool {
		now := time.Now()
		if e, ok := q.uniq[p.Key]; ok && e.held(now) {
			res = backend.UniqueResult{ID: e.id, Duplicate: true}
			return false
		}
		q.sweepUniq(now)
		e := &uniqEntry{key: p.Key, id: m.env.ID, For: max(p.For, 0)}
		q.uniq[p.Key] = e
		q.uniqByID[m.env.ID] = e
		res = backend.UniqueResult{ID: m.env.ID}
		return true
	})
	if res.ID == "" { // a repeat of an id the queue holds: dropped, as by Publish
		res.ID = m.env.ID
	}
	return res, err
}

// sweepUniq forgets the expired keys once the queue holds twice as many as after the
// last sweep: the cost is spread over the publishes. the queue's lock is held.
func (q *queue) sweepUniq(now time.Time) {
	if len(q.uniq) < max(uniqSweepMin, 2*q.uniqKept) {
		return
	}
	for k, e := range q.uniq {
		if !e.held(now) {
			delete(q.uniq, k)
		}
	}
	q.uniqKept = len(q.uniq)
}

// uniqFinished starts the expiry of the key held by job id, if it holds one: the job
// was acknowledged or dead-lettered. the queue's lock is held.
func (q *queue) uniqFinished(id string, now time.Time) {
	e, ok := q.uniqByID[id]
	if !ok {
		return
	}
	delete(q.uniqByID, id)
	e.until = now.Add(e.For)
	if e.For == 0 {
		delete(q.uniq, e.key)
	}
}

// uniqFreed frees the key held by job id, if it holds one: the waiting job was
// deleted, and a deleted job holds nothing. the queue's lock is held.
func (q *queue) uniqFreed(id string) {
	if e, ok := q.uniqByID[id]; ok {
		delete(q.uniqByID, id)
		if q.uniq[e.key] == e {
			delete(q.uniq, e.key)
		}
	}
}

// uniqRenamed moves the key of job old to job next, published in its place.
// the queue's lock is held.
func (q *queue) uniqRenamed(old, next string) {
	if e, ok := q.uniqByID[old]; ok && old != next {
		delete(q.uniqByID, old)
		e.id = next
		q.uniqByID[next] = e
	}
}
