package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// maxOutstanding bounds the publishes awaiting their confirm on one channel; the
// returns buffer is as large, so the connection's reader never blocks on it.
const maxOutstanding = 256

// publisher publishes on one channel in confirm mode, with mandatory set, and turns a
// broker's return into an error.
//
// A return names no delivery tag, and message ids repeat (a retry keeps its job's id; a
// retried parent publishes its children under the same ids again), so each publish is
// matched to its return by a number of the publisher's own, carried in the message's
// correlation id. A return is kept only while its publish waits for it: one whose
// publish gave up is dropped, so it can never be taken for a later publish's.
type publisher struct {
	l       *link
	ch      *amqp.Channel // safe for concurrent publishes: it numbers confirms under its lock
	slots   chan struct{}
	returns chan amqp.Return
	seq     atomic.Uint64

	retMu    sync.Mutex
	inflight map[string]bool // publish number -> returned, for publishes awaiting their confirm
}

func newPublisher(l *link) (*publisher, error) {
	ch, err := l.conn.Channel()
	if err != nil {
		return nil, &backend.TransportError{Op: "open the publishing channel", Err: err}
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, &backend.TransportError{Op: "enable publisher confirms", Err: err}
	}
	p := &publisher{
		l:        l,
		ch:       ch,
		slots:    make(chan struct{}, maxOutstanding),
		returns:  make(chan amqp.Return, maxOutstanding),
		inflight: make(map[string]bool),
	}
	ch.NotifyReturn(p.returns)
	return p, nil
}

// publish sends msg (setting its correlation id) and waits for its confirm, until ctx
// ends. A write the broker does not take is ended stuckGrace after ctx (link.guard). A
// publish that gives up waiting for its confirm keeps its slot until the confirm comes
// or the channel ends, so that the returns buffer (as large as the slots) always has
// room: the connection's reader never blocks on it.
//
// A return (no queue took a mandatory message) arrives before the confirm of the same
// message, so once the confirm is in, the returns buffer holds it if there was one.
func (p *publisher) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	tag := strconv.FormatUint(p.seq.Add(1), 36)
	msg.CorrelationId = tag
	p.retMu.Lock()
	p.inflight[tag] = false
	p.retMu.Unlock()
	stop := p.l.guard(ctx, "a publish")
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	stop()
	if err != nil {
		p.claim(tag)
		<-p.slots
		return err
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		go func() {
			<-dc.Done() // the confirm, or the channel's end
			p.claim(tag)
			<-p.slots
		}()
		return fmt.Errorf("waiting for the broker's confirm: %w", ctx.Err())
	}
	returned := p.claim(tag)
	<-p.slots
	switch {
	case !dc.Acked() && p.ch.IsClosed():
		return fmt.Errorf("the channel closed before the broker confirmed the message: %w", amqp.ErrClosed)
	case !dc.Acked():
		return errors.New("the broker refused the message (nack)")
	case returned:
		return fmt.Errorf("no queue took the message (routing key %q): %w", key, backend.UnknownQueue(queueOfKey(key)))
	}
	return nil
}

// claim moves the returns received so far to their publishes, then ends tag's wait and
// reports whether its message was returned.
func (p *publisher) claim(tag string) bool {
	p.retMu.Lock()
	defer p.retMu.Unlock()
	for drained := false; !drained; {
		select {
		case r, ok := <-p.returns:
			if !ok {
				drained = true
				break
			}
			if _, waiting := p.inflight[r.CorrelationId]; waiting {
				p.inflight[r.CorrelationId] = true
			}
		default:
			drained = true
		}
	}
	returned := p.inflight[tag]
	delete(p.inflight, tag)
	return returned
}

// queueOfKey takes the queue's name from a routing key (after the delay digits).
func queueOfKey(key string) string {
	for len(key) > 2 && (key[0] == '0' || key[0] == '1') && key[1] == '.' {
		key = key[2:]
	}
	return key
}
