// Package stream is the stream core of the embedded backends (memory and pebble): the
// ready jobs of one queue by priority level (Queue), the streams that offer them to
// consumers one at a time, count what is on offer and put back, in order, what a
// stream held when it ended (Streams, Stream, Claim), the gate of concurrency keys that
// parks a ready job while as many of its key as the queue's limit are ahead of it
// (JoinKey, LeaveKey, SetKeyLimit), and the directory of declared
// queues every operation starts from (Directory). A backend keeps what it knows of a
// job (a message in memory, the key of a value on disk) in its Item, makes the
// delivery a consumer receives (the deliver function it gives Streams.Consume) and
// does its own settles; the core keeps the order and the counts.
package stream

import (
	"iter"
	"sync"
)

// Item is a ready job as a backend holds it, usually a pointer to the backend's own
// type. A queue calls its methods with its lock held: they only read or set a field of
// the item, never block or take a lock.
type Item interface {
	// Level is the job's priority: a queue clamps it to its levels.
	Level() int
	// Requeue marks the job as handed out before: it goes back to the front of its
	// level, and its next delivery says it is redelivered.
	Requeue()
	// ID is the job's id, and Key its concurrency key (empty for none): the queue's
	// key gate hands out only as many jobs of one key at once as its limit lets.
	ID() string
	Key() string
}

// Queue is the stream side of one queue: its ready items, one FIFO per priority level
// (the highest level is taken first), its streams and its counts. Its lock also guards
// whatever the backend keeps beside it for the queue; methods whose doc says "the lock
// is held" expect the caller to hold it, the others take it.
type Queue[T Item] struct {
	mu      sync.Mutex
	levels  int
	ready   []Ring[T] // index = priority level
	nready  int
	streams map[*Stream[T]]struct{}
	// unsettled counts the items taken off the queue and not settled, over all its
	// streams; offering, those of them a stream offers and no consumer has received
	// yet: still pending, from the consumer's point of view.
	unsettled int
	offering  int
	// keys is the gate of concurrency keys: the ready items it parks are in none of
	// the FIFOs nor in nready.
	keys keyGate[T]
}

// NewQueue returns an empty queue with priority levels 0 to levels.
func NewQueue[T Item](levels int) *Queue[T] {
	return &Queue[T]{levels: levels, ready: make([]Ring[T], levels+1), streams: make(map[*Stream[T]]struct{})}
}

// Lock takes the queue's lock.
func (q *Queue[T]) Lock() { q.mu.Lock() }

// Unlock releases the queue's lock.
func (q *Queue[T]) Unlock() { q.mu.Unlock() }

// Levels returns the highest priority level of the queue.
func (q *Queue[T]) Levels() int { return q.levels }

func (q *Queue[T]) level(v T) int { return max(0, min(v.Level(), q.levels)) }

// PushBack makes v ready behind its equals and wakes the streams, or parks it until
// its concurrency key lets it run (JoinKey). The lock is held.
func (q *Queue[T]) PushBack(v T) {
	if q.park(v) {
		return
	}
	q.ready[q.level(v)].PushBack(v)
	q.nready++
	q.wakeAll()
}

// Push is PushBack under the queue's lock.
func (q *Queue[T]) Push(v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.PushBack(v)
}

// PushFront puts back v, which was handed out, ahead of its equals (Requeue marks it)
// and wakes the streams; or parks it, as PushBack does. The lock is held.
func (q *Queue[T]) PushFront(v T) {
	v.Requeue()
	if q.park(v) {
		return
	}
	q.ready[q.level(v)].PushFront(v)
	q.nready++
	q.wakeAll()
}

// pop takes the first ready item of the highest level. The lock is held.
func (q *Queue[T]) pop() (T, bool) {
	var zero T
	if q.nready == 0 {
		return zero, false
	}
	for level := q.levels; level >= 0; level-- {
		if q.ready[level].Len() > 0 {
			q.nready--
			return q.ready[level].PopFront(), true
		}
	}
	return zero, false
}

// Ready returns how many items are ready, not counting those parked for their key
// (KeyWaiting). The lock is held.
func (q *Queue[T]) Ready() int { return q.nready }

// Unsettled returns how many items streams have taken and not settled. The lock is
// held.
func (q *Queue[T]) Unsettled() int { return q.unsettled }

// Counts returns the pending items (ready, or offered and not received yet) and the
// unacknowledged ones (received by a consumer and not settled). The lock is held.
func (q *Queue[T]) Counts() (pending, unacked int) {
	return q.nready + q.offering, q.unsettled - q.offering
}

// All yields the ready items, lowest level first and each level front to back, then
// those parked for their key: for finding one. The lock is held, and the queue must
// not change while it runs.
func (q *Queue[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for level := range q.ready {
			r := &q.ready[level]
			for i := range r.Len() {
				if !yield(r.At(i)) {
					return
				}
			}
		}
		q.parkedItems(yield)
	}
}

// InOrder yields the ready items in the order they would be delivered: highest level
// first, then those parked for their key (each key's in its line's order, the keys in
// no set order). The lock is held, and the queue must not
// change while it runs.
func (q *Queue[T]) InOrder() iter.Seq[T] {
	return func(yield func(T) bool) {
		for level := q.levels; level >= 0; level-- {
			r := &q.ready[level]
			for i := range r.Len() {
				if !yield(r.At(i)) {
					return
				}
			}
		}
		q.parkedItems(yield)
	}
}

// Remove takes the first ready item that match accepts, in the order of All, off the
// queue, keeping the order of the others. Its place in its key's line stays, for the
// backend to free with LeaveKey once the job has ended. The lock is held.
func (q *Queue[T]) Remove(match func(T) bool) (T, bool) {
	for level := range q.ready {
		r := &q.ready[level]
		for i := range r.Len() {
			if v := r.At(i); match(v) {
				r.Remove(i)
				q.nready--
				return v, true
			}
		}
	}
	return q.unpark(match)
}

func (q *Queue[T]) wakeAll() {
	for s := range q.streams {
		s.wakeUp()
	}
}
