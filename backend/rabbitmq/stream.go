package rabbitmq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
)

// resubscribeBackoff paces a stream's attempts to consume again after a lost
// connection.
var resubscribeBackoff = backoff.Policy{Base: 50 * time.Millisecond, Cap: 5 * time.Second, Jitter: backoff.Equal}

// Consume starts a stream of q.Name on a channel of its own with Qos(q.Prefetch). The
// stream survives lost connections: it consumes again once the backend has reconnected.
func (b *Backend) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	q = q.Normalize(b.log)
	if q.KeyConcurrency > 0 {
		return nil, keyConcurrencyRefused(q)
	}
	if err := b.exists(ctx, q.Name); err != nil {
		return nil, err
	}
	s := &stream{b: b, q: q, ctx: ctx, out: make(chan backend.Delivery), stop: make(chan struct{}), done: make(chan struct{})}
	sub, err := s.subscribe(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		go sub.ch.Close() // not waited for: the backend is closing the connection under it
		return nil, backend.ErrShutDown
	}
	b.tasks.Add()
	b.mu.Unlock()
	go s.run(sub)
	return s, nil
}

// stream is one consumer of a queue.
type stream struct {
	b    *Backend
	q    backend.QueueConfig
	ctx  context.Context
	out  chan backend.Delivery
	stop chan struct{}
	once sync.Once
	done chan struct{}

	ended atomic.Bool // set when run ends: settles then fail with ErrStreamClosed

	mu  sync.Mutex
	err error
}

// subscription is a stream's channel, its deliveries, and the connection under them.
type subscription struct {
	l    *link
	ch   *amqp.Channel
	msgs <-chan amqp.Delivery
}

func (s *stream) Deliveries() <-chan backend.Delivery { return s.out }

func (s *stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Drop ends the stream. It waits for the broker to take the channel's close only while
// the stream's context lasts and the backend is open (see run): cancel the context
// first and Drop returns at once; the broker puts back what the stream held when the
// close reaches it, or when the connection ends.
func (s *stream) Drop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// subscribe opens a channel and starts consuming on it. It returns when ctx ends,
// whatever the broker does (await); a subscription that completes after that is closed.
func (s *stream) subscribe(ctx context.Context) (subscription, error) {
	l, _, err := s.b.current(ctx)
	if err != nil {
		return subscription{}, err
	}
	sub, err := await(ctx, l, "consume "+s.q.Name, func() (subscription, error) {
		ch, err := l.conn.Channel()
		if err != nil {
			return subscription{}, &backend.TransportError{Op: "open a channel", Queue: s.q.Name, Err: err}
		}
		if err := ch.Qos(s.q.Prefetch, 0, false); err != nil {
			ch.Close()
			return subscription{}, &backend.TransportError{Op: "set prefetch", Queue: s.q.Name, Err: err}
		}
		msgs, err := ch.Consume(s.q.Name, "", false, false, false, false, nil)
		if err != nil {
			ch.Close()
			return subscription{}, unknownOr("inspect", s.q.Name, err)
		}
		return subscription{l: l, ch: ch, msgs: msgs}, nil
	}, func(sub subscription) { sub.ch.Close() })
	if err != nil && err == ctx.Err() {
		return subscription{}, &backend.TransportError{Op: "consume: waiting for the broker's answer", Queue: s.q.Name, Err: err}
	}
	return sub, err
}

// run hands out deliveries until the stream is dropped, its context ends or the
// backend closes; after a lost connection it subscribes again. Closing a channel makes
// the broker requeue every delivery of it not yet acknowledged.
//
// Ending closes the channel and waits for the broker's close-ok, but only while the
// stream's context lasts and the backend is open: a stream ended by its context (as
// the worker ends its streams) or by Close does not wait on the broker, and a broker
// that does not answer cannot hold Drop beyond the stream's context.
func (s *stream) run(sub subscription) {
	defer s.b.tasks.Done()
	defer close(s.done)
	defer close(s.out)
	ch, msgs, l := sub.ch, sub.msgs, sub.l
	end := func(err error) {
		s.ended.Store(true)
		if ch != nil {
			s.closeChannel(l, ch)
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
	// One select: while a delivery waits for the consumer, in is nil; while none
	// waits, out is nil.
	var pending backend.Delivery
	var out chan<- backend.Delivery
	var in <-chan amqp.Delivery
	for {
		if ch == nil {
			sub, err := s.resubscribe()
			if err != nil {
				end(err)
				return
			}
			ch, msgs, l = sub.ch, sub.msgs, sub.l
		}
		if pending == nil {
			in = msgs
		}
		select {
		case m, ok := <-in:
			if !ok {
				// The channel or the connection closed under us, or the broker
				// cancelled the consumer and the channel lives on: close it, which
				// puts back what it held, and consume again.
				if !ch.IsClosed() {
					s.closeChannel(l, ch)
				}
				ch = nil
				continue
			}
			pending, out, in = newDelivery(s, l, ch, &m), s.out, nil
		case out <- pending:
			pending, out = nil, nil
		case <-s.stop:
			end(nil)
			return
		case <-s.b.done:
			end(backend.ErrShutDown)
			return
		case <-s.ctx.Done():
			end(s.ctx.Err())
			return
		}
	}
}

// closeChannel closes ch, a channel of l's connection, and waits for the broker's
// close-ok while the stream's context lasts and the backend is open.
func (s *stream) closeChannel(l *link, ch *amqp.Channel) {
	ctx, cancel := context.WithCancel(s.ctx)
	unwatch := context.AfterFunc(s.b.ctx, cancel)
	await(ctx, l, "closing the channel of a stream of "+s.q.Name, func() (struct{}, error) { return struct{}{}, ch.Close() }, nil)
	unwatch()
	cancel()
}

// resubscribe waits for the connection and consumes again, with backoff, until it
// succeeds or the stream ends: dropped (nil error), its context done, or the backend
// closed. Each of those also ends a wait for the connection under way.
func (s *stream) resubscribe() (subscription, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
		case <-s.b.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	var sub subscription
	err := backoff.Retry(ctx, resubscribeBackoff, func(ctx context.Context, _ int) error {
		var err error
		sub, err = s.subscribe(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, backend.ErrShutDown), errors.Is(err, backend.ErrUnknownQueue), ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		s.b.log.Warn("consuming again failed", "queue", s.q.Name, "error", err)
		return err
	})
	if err == nil {
		return sub, nil
	}
	select {
	case <-s.stop:
		return subscription{}, nil
	default:
	}
	switch {
	case s.ctx.Err() != nil:
		return subscription{}, s.ctx.Err()
	case s.b.isClosed():
		return subscription{}, backend.ErrShutDown
	}
	return subscription{}, err
}

// Delivery states.
const (
	stateOpen int32 = iota
	stateSettling
	stateSettled
)

// delivery is a message handed to a consumer, settled on the channel it came on.
type delivery struct {
	s         *stream
	l         *link
	ch        *amqp.Channel
	msg       *amqp.Delivery
	env       backend.Envelope
	decodeErr error
	state     atomic.Int32
}

func newDelivery(s *stream, l *link, ch *amqp.Channel, m *amqp.Delivery) *delivery {
	d := &delivery{s: s, l: l, ch: ch, msg: m}
	d.env, d.decodeErr = decode(s.q.Name, m)
	return d
}

func (d *delivery) Envelope() (backend.Envelope, error) { return d.env, d.decodeErr }

func (d *delivery) begin() error {
	if d.s.b.isClosed() {
		return backend.ErrShutDown
	}
	if !d.state.CompareAndSwap(stateOpen, stateSettling) {
		return backend.ErrAlreadySettled
	}
	if d.s.ended.Load() || d.ch.IsClosed() {
		d.state.Store(stateOpen)
		return backend.ErrStreamClosed
	}
	return nil
}

// ack acknowledges on the delivery's channel; a closed channel means the broker has
// put the message back. The ack is a write: a broker that does not take it cannot hold
// it beyond ctx (link.guard).
func (d *delivery) ack(ctx context.Context) error {
	stop := d.l.guard(ctx, "an ack")
	err := d.ch.Ack(d.msg.DeliveryTag, false)
	stop()
	if err != nil {
		d.state.Store(stateOpen)
		if errors.Is(err, amqp.ErrClosed) || d.ch.IsClosed() {
			return backend.ErrStreamClosed
		}
		return &backend.TransportError{Op: "ack", Queue: d.s.q.Name, Err: err}
	}
	d.state.Store(stateSettled)
	return nil
}

func (d *delivery) Ack(ctx context.Context) error {
	if err := d.begin(); err != nil {
		return err
	}
	return d.ack(ctx)
}

func (d *delivery) Retry(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(ctx, func() error { return d.s.b.Publish(ctx, next, delay) })
}

func (d *delivery) Defer(ctx context.Context, next backend.Envelope, delay time.Duration) error {
	return d.republish(ctx, func() error { return d.s.b.Defer(ctx, next, delay) })
}

func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	if reason == "" {
		reason = "dead-lettered without a reason"
	}
	return d.republish(ctx, func() error { return d.s.b.publishDead(ctx, d.s.q.Name, d.msg, reason) })
}

// republish publishes first, then acknowledges; if the publish fails the delivery
// stays unacknowledged.
func (d *delivery) republish(ctx context.Context, publish func() error) error {
	if err := d.begin(); err != nil {
		return err
	}
	if err := publish(); err != nil {
		d.state.Store(stateOpen)
		return err
	}
	return d.ack(ctx)
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}
