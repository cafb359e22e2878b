package stream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Streams are a backend's streams: what they all share (the channels that end them,
// the backend's hooks) and the Group of those running. Closed is required; set the
// fields before the first Consume.
type Streams[T Item] struct {
	Group
	// Closed is closed when the backend closes: every stream ends with
	// backend.ErrShutDown.
	Closed <-chan struct{}
	// Failed, when not nil, is closed when the backend can no longer hand out jobs:
	// every stream ends with what Failure returns.
	Failed <-chan struct{}
	// Failure, when not nil, is asked before each item is taken: an error ends the
	// stream with it before anything more is taken.
	Failure func() error
	// Order, when not nil, orders the items an ending stream puts back (the least at
	// the front of its level). Nil keeps the order they were taken in. It is called
	// with the queue's lock held: a comparison of the items' fields, nothing more.
	Order func(a, b T) int
	// Released, when not nil, is called without the queue's lock with each item an
	// ending stream put back.
	Released func(T)
}

// Group is the set of a backend's running streams, so that closing the backend can
// wait for them: after Close, no stream joins it. The zero value is an empty group.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// join counts a new stream in, or fails with backend.ErrShutDown after Close: the
// backend's Close either sees the stream or its Consume sees the backend closed.
func (g *Group) join() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return backend.ErrShutDown
	}
	g.wg.Add(1)
	return nil
}

// Close refuses new streams from now on. It is idempotent.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait waits until every stream that joined has ended, or for ctx.
func (g *Group) Wait(ctx context.Context) error {
	finished := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for streams: %w", ctx.Err())
	}
}

// Consume starts a stream of q under ctx, a *Stream holding at most prefetch
// deliveries unsettled. deliver makes the delivery a consumer receives for c, an item
// the stream has just taken for offering: the backend's part of a stream. It is called
// without the queue's lock; an error ends the stream with it, and c's item goes back
// to the front of its queue. The stream ends when ctx does, on Drop, or when the
// backend closes or fails. Consume fails with backend.ErrShutDown once the group is
// closed.
func (ss *Streams[T]) Consume(ctx context.Context, q *Queue[T], prefetch int, deliver func(c *Claim[T]) (backend.Delivery, error)) (backend.Stream, error) {
	if err := ss.join(); err != nil {
		return nil, err
	}
	s := &Stream[T]{
		q:        q,
		ctx:      ctx,
		ss:       ss,
		prefetch: prefetch,
		deliver:  deliver,
		ch:       make(chan backend.Delivery),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
		inflight: make(map[*Claim[T]]struct{}),
	}
	q.mu.Lock()
	q.streams[s] = struct{}{}
	q.mu.Unlock()
	go s.run()
	return s, nil
}

// Stream is one consumer of a queue: a backend.Stream. A goroutine hands out
// deliveries one at a time through an unbuffered channel, so an item leaves the queue
// only when a consumer takes it: nothing is claimed ahead of the consumer's capacity.
type Stream[T Item] struct {
	q        *Queue[T]
	ctx      context.Context
	ss       *Streams[T]
	prefetch int
	deliver  func(c *Claim[T]) (backend.Delivery, error)
	ch       chan backend.Delivery
	wake     chan struct{} // buffered 1: something changed, look again
	stop     chan struct{} // closed by Drop
	dropOnce sync.Once
	finished chan struct{} // closed when run returns

	// guarded by q.mu
	inflight map[*Claim[T]]struct{}
	taken    uint64 // how many items the stream took: the order of its claims
	ended    bool
	err      error
}

var _ backend.Stream = (*Stream[Item])(nil)

// Deliveries returns the channel deliveries arrive on; it is closed when the stream
// ends.
func (s *Stream[T]) Deliveries() <-chan backend.Delivery { return s.ch }

// Err says why the stream ended: nil after Drop, else the context's error,
// backend.ErrShutDown, or the backend's failure.
func (s *Stream[T]) Err() error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return s.err
}

// Drop ends the stream and waits until it has: its unsettled deliveries are back at
// the front of the queue, in order.
func (s *Stream[T]) Drop() {
	s.dropOnce.Do(func() { close(s.stop) })
	<-s.finished
}

// wakeUp makes the stream look at its queue again.
func (s *Stream[T]) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Stream[T]) run() {
	defer s.ss.wg.Done()
	defer close(s.finished)
	defer close(s.ch)
	// One select: while a delivery is on offer, out is s.ch and wake is not listened to;
	// while none is, out is nil and a wake makes the stream look at the queue again.
	var c *Claim[T]
	var d backend.Delivery
	for {
		if c == nil {
			var err error
			if c, d, err = s.take(); err != nil {
				s.end(err)
				return
			}
		}
		var out chan<- backend.Delivery
		var wake <-chan struct{}
		if c != nil {
			out = s.ch
		} else {
			wake = s.wake
		}
		var err error
		select {
		case out <- d:
			c.Received()
			c, d = nil, nil
			continue
		case <-wake:
			continue
		case <-s.stop:
		case <-s.ss.Closed:
			err = backend.ErrShutDown
		case <-s.ss.Failed:
			err = s.ss.Failure()
		case <-s.ctx.Done():
			err = s.ctx.Err()
		}
		if c != nil {
			c.Received() // no longer on offer: end puts it back
		}
		s.end(err)
		return
	}
}

// take takes the next item off the queue for offering, if prefetch allows one, and has
// the backend make its delivery. On the backend's error the item is no longer on offer
// and, being in s.inflight and open, goes back when the stream ends.
func (s *Stream[T]) take() (*Claim[T], backend.Delivery, error) {
	if s.ss.Failure != nil {
		if err := s.ss.Failure(); err != nil {
			return nil, nil, err
		}
	}
	q := s.q
	q.mu.Lock()
	if len(s.inflight) >= s.prefetch {
		q.mu.Unlock()
		return nil, nil, nil
	}
	v, ok := q.pop()
	if !ok {
		q.mu.Unlock()
		return nil, nil, nil
	}
	s.taken++
	c := &Claim[T]{s: s, item: v, order: s.taken}
	c.offered.Store(true)
	s.inflight[c] = struct{}{}
	q.unsettled++
	q.offering++
	q.mu.Unlock()
	d, err := s.deliver(c)
	if err != nil {
		c.Received()
		return nil, nil, err
	}
	return c, d, nil
}

// end puts every unsettled delivery back at the front of the queue, in order, and
// records why the stream ended.
func (s *Stream[T]) end(err error) {
	q := s.q
	q.mu.Lock()
	s.ended, s.err = true, err
	delete(q.streams, s)
	var released []*Claim[T]
	for c := range s.inflight {
		// A claim in the middle of a settle is left to finish it; one whose settle
		// fails releases itself (Reopen).
		if c.state.CompareAndSwap(stateOpen, stateReleased) {
			released = append(released, c)
		}
	}
	order := func(a, b *Claim[T]) int { return cmp.Compare(a.order, b.order) }
	if s.ss.Order != nil {
		order = func(a, b *Claim[T]) int { return s.ss.Order(a.item, b.item) }
	}
	slices.SortFunc(released, order)
	// Pushed newest first, so that the oldest ends up at the front.
	for i := len(released) - 1; i >= 0; i-- {
		c := released[i]
		delete(s.inflight, c)
		q.unsettled--
		q.PushFront(c.item)
	}
	q.mu.Unlock()
	if s.ss.Released != nil {
		for _, c := range released {
			s.ss.Released(c.item)
		}
	}
}

// Claim states.
const (
	stateOpen int32 = iota
	stateSettling
	stateSettled
	stateReleased
)

// Claim is an item a stream took off its queue for a consumer: the core's part of a
// delivery, from its offer to its settle or its return to the queue.
type Claim[T Item] struct {
	s        *Stream[T]
	item     T
	order    uint64 // the stream's count of items taken, at this one
	state    atomic.Int32
	offered  atomic.Bool // counted in q.offering; set and cleared under q.mu, read without
	orphaned bool        // guarded by q.mu: see Orphan
}

// Item returns the claimed item.
func (c *Claim[T]) Item() T { return c.item }

// Queue returns the queue the item was taken off.
func (c *Claim[T]) Queue() *Queue[T] { return c.s.q }

// Received ends the delivery's time on offer, once: the stream calls it after the
// consumer took the delivery, and a backend may call it as well when the delivery is
// read, so that stats read by a consumer that has just received it never count it as
// pending. Whichever call comes second, the count is gone when it returns: the flag is
// cleared after the count, both under the queue's lock, so that a caller that finds it
// cleared reads stats without it (a flag cleared first let the second caller return
// while the first had yet to take the count: its consumer read the delivery it held
// as pending).
func (c *Claim[T]) Received() {
	if !c.offered.Load() {
		return
	}
	q := c.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.offered.Load() {
		q.offering--
		c.offered.Store(false)
	}
}

// Begin moves the claim into its settle, or says why it cannot be settled:
// backend.ErrStreamClosed when its stream put it back, backend.ErrAlreadySettled when
// it is settled or being settled.
func (c *Claim[T]) Begin() error {
	if c.state.CompareAndSwap(stateOpen, stateSettling) {
		return nil
	}
	if c.state.Load() == stateReleased {
		return backend.ErrStreamClosed
	}
	return backend.ErrAlreadySettled
}

// Reopen undoes Begin after a failed settle: the claim stays unsettled, or its item
// goes back to the front of the queue if its stream ended meanwhile or it is orphaned.
// It reports whether the item went back.
func (c *Claim[T]) Reopen() (released bool) {
	q := c.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !c.s.ended && !c.orphaned {
		c.state.Store(stateOpen)
		return false
	}
	c.release()
	return true
}

// Orphan marks a claim whose settle's outcome its consumer does not know (its write is
// still in flight): should the settle fail, now or already, the item goes back to the
// queue rather than hold a prefetch slot until the stream ends. It reports whether the
// item went back now.
func (c *Claim[T]) Orphan() (released bool) {
	q := c.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	c.orphaned = true
	if c.state.Load() == stateOpen { // the settle failed already: Reopen ran
		c.release()
		return true
	}
	return false
}

// release puts the item back at the front of its queue. q.mu is held.
func (c *Claim[T]) release() {
	q := c.s.q
	c.state.Store(stateReleased)
	delete(c.s.inflight, c)
	q.unsettled--
	q.PushFront(c.item)
	c.s.wakeUp()
}

// FinishLocked completes a settle: the claim leaves its stream, freeing a prefetch
// slot. The queue's lock is held; once the caller has released it, it calls Wake.
func (c *Claim[T]) FinishLocked() {
	delete(c.s.inflight, c)
	c.s.q.unsettled--
	c.state.Store(stateSettled)
}

// Wake makes the claim's stream look at its queue again, as after a freed slot.
func (c *Claim[T]) Wake() { c.s.wakeUp() }
