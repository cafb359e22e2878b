package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Headers of a stream message; the body is the wasm (a module), the heartbeat's JSON,
// or empty.
const (
	hKind      = "wasmjobs-kind"
	hName      = "wasmjobs-name"
	hVersion   = "wasmjobs-version"
	hManifest  = "wasmjobs-manifest"
	hPushedAt  = "wasmjobs-pushed-at" // unix nanoseconds
	hSignature = "wasmjobs-signature"
	hMarker    = "wasmjobs-marker"
)

// streamArgs declare the stream. Retention drops whole segments older than a day;
// every host re-publishes the current set well within that (Follower's Republish).
var streamArgs = amqp.Table{"x-queue-type": "stream", "x-max-age": "1D"}

// dialTimeout bounds a connection's TCP dial and AMQP handshake.
const dialTimeout = 10 * time.Second

// Dial connects to the first of urls that answers. It returns when ctx ends, whatever
// the broker does: ctx's end closes the socket of a handshake under way.
func Dial(ctx context.Context, urls []string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range urls {
		conn, err := dial(ctx, u)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("connect to the broker: %w", errors.Join(errs...))
}

// dial connects to url within dialTimeout and ctx.
func dial(ctx context.Context, url string) (*amqp.Connection, error) {
	var dialer net.Dialer
	unwatch := func() bool { return true }
	d := func(network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// As amqp.DefaultDial does: a deadline for the handshake, which amqp091-go
		// clears once the connection is open (heartbeats take over).
		if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		unwatch = context.AfterFunc(ctx, func() { c.Close() })
		return c, nil
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Dial: d})
	if !unwatch() && err == nil {
		conn.Close() // ctx ended and closed the socket under the handshake's end
		return nil, ctx.Err()
	}
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return conn, err
}

// Declare declares the stream on conn.
func Declare(conn *amqp.Connection, stream string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("declare stream %s: %w", stream, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(stream, true, false, false, false, streamArgs); err != nil {
		return fmt.Errorf("declare stream %s: %w", stream, err)
	}
	return nil
}

// encode makes a push's message.
func (p *Push) encode() amqp.Publishing {
	h := amqp.Table{hKind: p.Kind, hName: p.Name, hPushedAt: p.PushedAt.UnixNano()}
	if p.Version != "" {
		h[hVersion] = p.Version
	}
	if len(p.Manifest) > 0 {
		h[hManifest] = p.Manifest
	}
	if len(p.Signature) > 0 {
		h[hSignature] = p.Signature
	}
	return amqp.Publishing{Headers: h, Body: p.Wasm, DeliveryMode: amqp.Persistent, Timestamp: time.Now()}
}

// decodePush reads a module or removal message.
func decodePush(d amqp.Delivery) (Push, error) {
	p := Push{Wasm: d.Body}
	p.Kind, _ = d.Headers[hKind].(string)
	p.Name, _ = d.Headers[hName].(string)
	p.Version, _ = d.Headers[hVersion].(string)
	p.Manifest, _ = d.Headers[hManifest].([]byte)
	p.Signature, _ = d.Headers[hSignature].([]byte)
	ns, ok := d.Headers[hPushedAt].(int64)
	if !ok {
		return p, fmt.Errorf("push of %q: no %s header", p.Name, hPushedAt)
	}
	p.PushedAt = time.Unix(0, ns)
	if err := CheckName(p.Name); err != nil {
		return p, err
	}
	if p.Kind == KindRemove {
		p.Wasm, p.Manifest, p.Version = nil, nil, ""
	}
	return p, nil
}

// publish sends msg to the stream on a confirming channel and waits for the broker's
// confirm while ctx lasts. amqp091-go's channel calls take no context, and a broker
// that hangs would hold them until the connection's heartbeat check (30 s): when ctx
// ends first, the connection is closed (within closeTimeout), which ends them; a
// follower then reads the stream again on a new connection.
func publish(ctx context.Context, conn *amqp.Connection, stream string, msg amqp.Publishing) error {
	stop := context.AfterFunc(ctx, func() { closeConn(conn) })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("publish to %s: %w", stream, err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("publish to %s: %w", stream, err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", stream, true, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", stream, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", stream, err)
	}
	if !ok {
		return fmt.Errorf("publish to %s: the broker nacked the message", stream)
	}
	return nil
}

// Publish sends a push to the stream: it refuses one over MaxMessageSize, declares the
// stream, and returns once the broker confirmed it.
func Publish(ctx context.Context, conn *amqp.Connection, stream string, p Push) error {
	if size := len(p.Wasm) + len(p.Manifest); size > MaxMessageSize-64<<10 {
		return fmt.Errorf("%w: %s is %d bytes", ErrTooBig, p.Name, size)
	}
	if err := Declare(conn, stream); err != nil {
		return err
	}
	return publish(ctx, conn, stream, p.encode())
}

// newMarker returns a unique marker id.
func newMarker() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// markerMessage is a reader's marker: reading up to it means reading everything the
// stream held when it was published.
func markerMessage(id string) amqp.Publishing {
	return amqp.Publishing{Headers: amqp.Table{hKind: KindMarker, hMarker: id}, Timestamp: time.Now()}
}

// consume opens a channel that consumes the stream from offset (a string such as
// "first", an int64 offset, or a time.Time).
func consume(conn *amqp.Connection, stream string, offset any) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("consume %s: %w", stream, err)
	}
	if err := ch.Qos(64, 0, false); err != nil { // a stream consumer must set a prefetch
		ch.Close()
		return nil, nil, fmt.Errorf("consume %s: %w", stream, err)
	}
	msgs, err := ch.Consume(stream, "", false, false, false, false, amqp.Table{"x-stream-offset": offset})
	if err != nil {
		ch.Close()
		return nil, nil, fmt.Errorf("consume %s: %w", stream, err)
	}
	return ch, msgs, nil
}

// Heartbeat is what a host reports of itself on the stream.
type Heartbeat struct {
	Host string `json:"host"`
	// Modules maps each serving module to its version.
	Modules map[string]string `json:"modules"`
	At      time.Time         `json:"at"`
}

// ReadHeartbeats returns the last heartbeat of each host that sent one within window,
// reading the stream up to a marker of its own.
func ReadHeartbeats(ctx context.Context, conn *amqp.Connection, stream string, window time.Duration) (map[string]Heartbeat, error) {
	if err := Declare(conn, stream); err != nil {
		return nil, err
	}
	ch, msgs, err := consume(conn, stream, time.Now().Add(-window))
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	id := newMarker()
	if err := publish(ctx, conn, stream, markerMessage(id)); err != nil {
		return nil, err
	}
	out := map[string]Heartbeat{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", stream, ctx.Err())
		case d, ok := <-msgs:
			if !ok {
				return nil, fmt.Errorf("read %s: the broker closed the channel", stream)
			}
			d.Ack(false)
			switch kind, _ := d.Headers[hKind].(string); kind {
			case KindMarker:
				if m, _ := d.Headers[hMarker].(string); m == id {
					return out, nil
				}
			case KindHeartbeat:
				var hb Heartbeat
				if json.Unmarshal(d.Body, &hb) == nil && hb.Host != "" && time.Since(hb.At) <= window {
					out[hb.Host] = hb
				}
			}
		}
	}
}

// DeleteStream deletes the stream (tests use streams of their own).
func DeleteStream(conn *amqp.Connection, stream string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDelete(stream, false, false, false)
	return err
}
