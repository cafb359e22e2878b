package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// maxOutstanding bounds the publishes awaiting their confirm on one channel; the
// returns buffer is as large, so the connection's reader never blocks on it.
const maxOutstanding = 256

// publisher publishes on one channel in confirm mode, with mandatory set, and turns a
// broker's return into an error.
type publisher struct {
	ch      *amqp.Channel // safe for concurrent publishes: it numbers confirms under its lock
	slots   chan struct{}
	returns chan amqp.Return

	retMu    sync.Mutex
	returned map[string]bool // message ids the broker returned, not yet claimed
}

func newPublisher(conn *amqp.Connection) (*publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, &backend.TransportError{Op: "open the publishing channel", Err: err}
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, &backend.TransportError{Op: "enable publisher confirms", Err: err}
	}
	p := &publisher{
		ch:       ch,
		slots:    make(chan struct{}, maxOutstanding),
		returns:  make(chan amqp.Return, maxOutstanding),
		returned: make(map[string]bool),
	}
	ch.NotifyReturn(p.returns)
	return p, nil
}

// publish sends msg and waits for its confirm. A return (no queue took a mandatory
// message) arrives before the confirm of the same message, so once the confirm is in,
// the returns buffer holds it if there was one.
func (p *publisher) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.slots }()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return err
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("waiting for the broker's confirm: %w", err)
		}
		return err
	}
	if !acked {
		return errors.New("the broker refused the message (nack)")
	}
	p.retMu.Lock()
	defer p.retMu.Unlock()
	for drained := false; !drained; {
		select {
		case r, ok := <-p.returns:
			if !ok {
				drained = true
				break
			}
			p.returned[r.MessageId] = true
		default:
			drained = true
		}
	}
	if p.returned[msg.MessageId] {
		delete(p.returned, msg.MessageId)
		return fmt.Errorf("no queue took the message (routing key %q): %w", key, backend.UnknownQueue(queueOfKey(key)))
	}
	return nil
}

// queueOfKey takes the queue's name from a routing key (after the delay digits).
func queueOfKey(key string) string {
	for len(key) > 2 && (key[0] == '0' || key[0] == '1') && key[1] == '.' {
		key = key[2:]
	}
	return key
}
