package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// stream is one consumer of a queue. A goroutine hands out deliveries one at a time
// through an unbuffered channel, so a message leaves the queue only when a consumer
// takes it: nothing is claimed ahead of the consumer's capacity.
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
	defer s.b.wg.Done()
	defer close(s.finished)
	defer close(s.ch)
	// One select: while a delivery is on offer, out is s.ch and wake is not listened to;
	// while none is, out is nil and a wake makes the stream look at the queue again.
	var d *delivery
	for {
		if d == nil {
			d = s.take()
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
			s.q.offering.Add(-1)
			d = nil
			continue
		case <-wake:
			continue
		case <-s.stop:
		case <-s.b.done:
			err = backend.ErrShutDown
		case <-s.ctx.Done():
			err = s.ctx.Err()
		}
		if d != nil {
			s.q.offering.Add(-1) // end puts it back
		}
		s.end(err)
		return
	}
}

// take takes the next message off the queue for offering, if prefetch allows one.
func (s *stream) take() *delivery {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if len(s.inflight) >= s.prefetch {
		return nil
	}
	m := s.q.pop()
	if m == nil {
		return nil
	}
	d := &delivery{s: s, m: m, redelivered: m.redelivered}
	s.inflight[d] = struct{}{}
	s.q.unsettle++
	s.q.offering.Add(1)
	return d
}

// end releases every unsettled delivery back to the queue, oldest first at the front,
// and records why the stream ended.
func (s *stream) end(err error) {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.ended, s.err = true, err
	delete(s.q.streams, s)
	var released []*delivery
	for d := range s.inflight {
		// A delivery in the middle of a settle is left to finish it; one whose publish
		// fails releases itself (see reopen).
		if d.state.CompareAndSwap(stateOpen, stateReleased) {
			released = append(released, d)
		}
	}
	// Put them back newest first, so the oldest ends up at the front.
	for i := len(released) - 1; i >= 0; i-- {
		d := released[i]
		delete(s.inflight, d)
		s.q.unsettle--
		s.q.pushFront(d.m)
	}
}

// Delivery states.
const (
	stateOpen int32 = iota
	stateSettling
	stateSettled
	stateReleased
)

// delivery is a message handed to a consumer.
type delivery struct {
	s           *stream
	m           *message // shared with later deliveries of the same message: read only
	redelivered bool
	state       atomic.Int32
}

func (d *delivery) Envelope() (backend.Envelope, error) {
	env := d.m.env
	env.Redelivered = d.redelivered
	return env, d.m.decodeErr
}

// begin moves the delivery into its settle, or says why it cannot be settled.
func (d *delivery) begin() error {
	if d.s.b.isClosed() {
		return backend.ErrShutDown
	}
	if d.state.CompareAndSwap(stateOpen, stateSettling) {
		return nil
	}
	if d.state.Load() == stateReleased {
		return backend.ErrStreamClosed
	}
	return backend.ErrAlreadySettled
}

// reopen undoes begin after a failed publish: the delivery stays unacknowledged, or
// goes back to the queue if its stream ended meanwhile.
func (d *delivery) reopen() {
	q := d.s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !d.s.ended {
		d.state.Store(stateOpen)
		return
	}
	d.state.Store(stateReleased)
	delete(d.s.inflight, d)
	q.unsettle--
	q.pushFront(d.m)
}

// finish completes a settle: the delivery leaves the stream, freeing a prefetch slot.
// final says the job is done (acknowledged or dead-lettered), not put back.
func (d *delivery) finish(dead string, final bool) {
	q := d.s.q
	q.mu.Lock()
	delete(d.s.inflight, d)
	q.unsettle--
	q.release(d.m)
	if final {
		q.uniqFinished(d.m.env.ID, time.Now())
	}
	if dead != "" {
		q.dead = append(q.dead, deadLetter{m: d.m, reason: dead, at: time.Now()})
	} else {
		q.acked++
	}
	d.state.Store(stateSettled)
	q.mu.Unlock()
	d.s.wakeUp()
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
	if err := d.s.b.enqueue(&message{env: next.Clone()}, delay, deferred, false); err != nil {
		d.reopen()
		return err
	}
	if next.ID != d.m.env.ID {
		d.s.q.mu.Lock()
		d.s.q.uniqRenamed(d.m.env.ID, next.ID)
		d.s.q.mu.Unlock()
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
