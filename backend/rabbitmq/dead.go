package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// publishDead publishes a copy of m to queue's dead letters with the reason, and waits
// for the confirm. A message without an id gets one, so that it can be replayed.
func (b *Backend) publishDead(ctx context.Context, queue string, m *amqp.Delivery, reason string) error {
	h := amqp.Table{}
	for k, v := range m.Headers {
		h[k] = v
	}
	h[hDeadReason] = reason
	h[hDeadAt] = time.Now().UnixNano()
	id := m.MessageId
	if id == "" {
		id = backend.NewID()
	}
	msg := amqp.Publishing{
		MessageId: id, Headers: h, Body: m.Body, Priority: m.Priority, DeliveryMode: amqp.Persistent,
		ContentType: m.ContentType, Timestamp: m.Timestamp,
	}
	_, pub, err := b.current(ctx)
	if err != nil {
		return err
	}
	if err := pub.publish(ctx, "", DeadQueue(queue), msg); err != nil {
		return &backend.TransportError{Op: "dead-letter", Queue: queue, Err: err}
	}
	return nil
}

// deadLetter decodes a message of a dead-letter queue.
func deadLetter(queue string, m *amqp.Delivery) backend.DeadLetter {
	env, _ := decode(queue, m)
	dl := backend.DeadLetter{Envelope: env}
	if r, ok := m.Headers[hDeadReason].(string); ok {
		dl.Reason = r
	}
	if ns, ok, _ := intHeader(m.Headers, hDeadAt); ok {
		dl.At = time.Unix(0, ns)
	}
	return dl
}

// scanDead takes up to limit messages (all when limit <= 0) off queue's dead letters on
// a channel of its own, unacknowledged, and calls visit for each until it returns false.
// Closing the channel afterwards puts back every message not acknowledged by visit. It
// returns when ctx ends, whatever the broker does (onChannel); the scan stops at its
// next message then. visit runs on the scan's goroutine: it keeps what it gathers to
// itself until scanDead has returned.
func (b *Backend) scanDead(ctx context.Context, queue string, limit int, visit func(ch *amqp.Channel, m *amqp.Delivery) (bool, error)) error {
	if err := b.exists(ctx, queue); err != nil {
		return err
	}
	_, err := onChannel(ctx, b, "read the dead letters of "+queue, func(ctx context.Context, ch *amqp.Channel) (struct{}, error) {
		for n := 0; limit <= 0 || n < limit; n++ {
			if ctx.Err() != nil {
				return struct{}{}, ctx.Err()
			}
			m, ok, err := ch.Get(DeadQueue(queue), false)
			if err != nil {
				return struct{}{}, unknownOr("inspect", DeadQueue(queue), err)
			}
			if !ok {
				return struct{}{}, nil
			}
			more, err := visit(ch, &m)
			if err != nil || !more {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// DeadLetters lists up to limit dead letters of queue, oldest first.
func (b *Backend) DeadLetters(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	var mu sync.Mutex // the scan may outlive this call when ctx ends
	var out []backend.DeadLetter
	err := b.scanDead(ctx, queue, limit, func(_ *amqp.Channel, m *amqp.Delivery) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, deadLetter(queue, m))
		return true, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReplayDeadLetter puts the dead letter id back on queue as a fresh job: attempt 1, no
// reason, no defers, one replay more (backend.ReplayedHeaders).
func (b *Backend) ReplayDeadLetter(ctx context.Context, queue, id string) error {
	var found atomic.Bool // the scan may outlive this call when ctx ends
	err := b.scanDead(ctx, queue, 0, func(ch *amqp.Channel, m *amqp.Delivery) (bool, error) {
		if m.MessageId != id {
			return true, nil
		}
		found.Store(true)
		msg := amqp.Publishing{MessageId: id, Body: m.Body, Priority: m.Priority, DeliveryMode: amqp.Persistent,
			ContentType: m.ContentType, Timestamp: m.Timestamp, Headers: amqp.Table{}}
		for k, v := range m.Headers {
			switch k {
			case hDeadReason, hDeadAt, hReason, hJob, hHeaders:
			default:
				msg.Headers[k] = v
			}
		}
		// The job's own headers take one replay more (backend.ReplayedHeaders).
		jobHeaders := map[string]string{}
		if t, ok := m.Headers[hHeaders].(amqp.Table); ok {
			for k, v := range t {
				if s, ok := v.(string); ok {
					jobHeaders[k] = s
				}
			}
		}
		t := amqp.Table{}
		for k, v := range backend.ReplayedHeaders(ctx, jobHeaders) {
			t[k] = v
		}
		msg.Headers[hHeaders] = t
		_, maxAttempts, _, enqueued, err := parseJobHeader(m.Headers[hJob])
		if err != nil {
			enqueued = time.Now().UnixNano() // a malformed message replays as a fresh job
		}
		msg.Headers[hJob] = jobHeader(1, maxAttempts, 0, enqueued)
		l, pub, err := b.current(ctx)
		if err != nil {
			return false, err
		}
		if err := pub.publish(ctx, "", queue, msg); err != nil {
			return false, &backend.TransportError{Op: "replay", Queue: queue, Err: err}
		}
		stop := l.guard(ctx, "an ack")
		err = ch.Ack(m.DeliveryTag, false)
		stop()
		if err != nil {
			return false, &backend.TransportError{Op: "ack the replayed dead letter", Queue: queue, Err: err}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if !found.Load() {
		return fmt.Errorf("dead letter %q of queue %q: %w", id, queue, backend.ErrNotFound)
	}
	return nil
}

// PurgeDeadLetters deletes queue's dead letters.
func (b *Backend) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	if err := b.exists(ctx, queue); err != nil {
		return 0, err
	}
	n, err := onChannel(ctx, b, "purge "+DeadQueue(queue), func(_ context.Context, ch *amqp.Channel) (int, error) {
		return ch.QueuePurge(DeadQueue(queue), false)
	})
	if err != nil {
		var te *backend.TransportError
		if errors.As(err, &te) {
			return 0, err
		}
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, backend.UnknownQueue(queue)
		}
		return 0, &backend.TransportError{Op: "purge", Queue: DeadQueue(queue), Err: err}
	}
	return n, nil
}
