// Package rabbitmq is the backend contract over RabbitMQ (AMQP 0-9-1), for hosts that
// share queues: several `wasmjobs run` consume the same queues of one broker.
//
// Topology (see RATIONALE.md):
//   - a work queue per queue name Q: classic, durable, with x-max-priority when the queue
//     has priority levels; messages are persistent;
//   - Q.dead holds Q's dead letters, each with its reason in a header;
//   - delays go through a binary chain shared by every queue: Levels topic exchanges
//     PREFIX.delay.UNITms.K and queues of the same names with x-message-ttl = 2^K units, each
//     dead-lettering into the level below, level 0 into the exchange PREFIX.deliver, to
//     which every work queue is bound. A delay, rounded up to whole units, is written as
//     Levels binary digits in the routing key, most significant first, followed by the
//     queue's name; level K routes a 1 in its digit into its queue and a 0 straight on.
//     Every message of a level queue has the same TTL, so none waits behind another.
//
// Wire format: the body is the payload; the message id is the job id; the priority
// property is the job's priority; the timestamp property is when it was enqueued (to the
// second); persistent delivery mode; the correlation id is the publishing host's own
// number for the publish, to match a broker's return to it (consumers ignore it).
// Headers: x-wasmjobs, the string "v1 ATTEMPT MAX_ATTEMPTS DEFERS ENQUEUED_AT_UNIX_NS";
// x-wasmjobs-reason, the last failure (string, when there is one); x-wasmjobs-headers,
// the job's own headers (a table of strings, when there are some). A dead letter adds x-wasmjobs-dead-reason (string) and
// x-wasmjobs-dead-at (int64 Unix nanoseconds). A message without a message id or the
// x-wasmjobs header, or with headers of the wrong form, cannot be decoded: its delivery
// reports backend.ErrMalformed, and it is dead-lettered with the reason like any other.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
)

// Defaults of Config.
const (
	DefaultUnit   = 10 * time.Millisecond
	DefaultLevels = 28 // 2^28 units of 10 ms: about 31 days
	DefaultPrefix = "wasmjobs"
)

// handshakeTimeout bounds a connection's TCP dial and AMQP handshake when the caller's
// context has no sooner deadline (amqp091-go's own default).
const handshakeTimeout = 30 * time.Second

// Config configures a RabbitMQ backend.
type Config struct {
	// URL is the broker's, amqp://user:pass@host:port/vhost.
	URL string
	// Unit is the delay granularity: delays are rounded up to whole units. Zero means
	// DefaultUnit; a value below 1 ms is clamped to 1 ms and logged.
	Unit time.Duration
	// Levels is the number of binary delay levels: the longest delay is
	// (2^Levels - 1) units. Zero means DefaultLevels; values are clamped to 1..40.
	Levels int
	// Prefix names the shared delay exchanges and queues. Zero means DefaultPrefix.
	Prefix string
	// ReconnectMin and ReconnectMax bound the backoff between reconnection attempts
	// (exponential, equal jitter). Zero means 100 ms and 10 s.
	ReconnectMin, ReconnectMax time.Duration
	// Logger receives reconnections and clamped settings. Nil discards them.
	Logger *slog.Logger
}

// Backend is a RabbitMQ backend. It reconnects by itself when the connection is lost,
// declares its queues again, and resumes its streams.
type Backend struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	link      *link // the connection; nil while reconnecting
	pub       *publisher
	connected chan struct{} // closed while a connection is up
	declared  map[string]backend.QueueConfig
	known     map[string]bool // queues seen to exist on the broker
	closed    bool
	done      chan struct{}   // closed by Close
	ctx       context.Context // done at Close: ends a reconnection under way
	cancel    context.CancelFunc
	tasks     group // the connection's watcher and the streams
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.DeadLetterStore = (*Backend)(nil)
	_ backend.StatsReader     = (*Backend)(nil)
)

// Redact hides the password of an AMQP URL.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "amqp://(unparsable URL)"
	}
	return u.Redacted()
}

// Open connects to the broker and declares the shared delay topology. It fails if the
// broker cannot be reached, or when ctx ends first.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Unit == 0 {
		cfg.Unit = DefaultUnit
	}
	cfg.Unit = backend.ClampGranularity(cfg.Unit, log)
	switch {
	case cfg.Levels == 0:
		cfg.Levels = DefaultLevels
	case cfg.Levels < 1 || cfg.Levels > 40:
		clamped := min(max(cfg.Levels, 1), 40)
		log.Warn("delay levels clamped", "from", cfg.Levels, "to", clamped)
		cfg.Levels = clamped
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = 100 * time.Millisecond
	}
	if cfg.ReconnectMax <= 0 {
		cfg.ReconnectMax = 10 * time.Second
	}
	lifetime, cancel := context.WithCancel(context.Background())
	b := &Backend{
		cfg:       cfg,
		log:       log,
		connected: make(chan struct{}),
		declared:  make(map[string]backend.QueueConfig),
		known:     make(map[string]bool),
		done:      make(chan struct{}),
		ctx:       lifetime,
		cancel:    cancel,
	}
	if err := b.connect(ctx); err != nil {
		cancel()
		return nil, err
	}
	return b, nil
}

// MaxDelay returns the longest delay the backend can hold.
func (b *Backend) MaxDelay() time.Duration {
	return time.Duration(1<<b.cfg.Levels-1) * b.cfg.Unit
}

// connect dials, declares the topology and the declared queues, and opens the
// publisher. It is called at Open and by the reconnection loop. It ends when ctx does,
// whatever the broker does: the dial takes ctx, and until the connection is in place
// ctx's end closes its socket, which ends the handshake and any declaration waiting on
// a broker that does not answer.
func (b *Backend) connect(ctx context.Context) error {
	var dialer net.Dialer
	var sock net.Conn // kept: closing it ends any call on the connection
	unwatch := func() bool { return true }
	dial := func(network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Heartbeats start after the handshake: until then a deadline guards it, as
		// amqp091-go's own dialer does; amqp091-go clears it once the connection opens.
		// ctx's own end closes the socket (below), so that the error is ctx's, not a
		// socket timeout that races it.
		if err := c.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		unwatch = context.AfterFunc(ctx, func() { c.Close() })
		sock = c
		return c, nil
	}
	failed := func(op string, err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return &backend.TransportError{Op: op, Err: err}
	}
	conn, err := amqp.DialConfig(b.cfg.URL, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Dial: dial})
	if err != nil {
		unwatch()
		return failed("connect to "+Redact(b.cfg.URL), err)
	}
	fail := func(err error) error {
		unwatch()
		conn.Close()
		if ctx.Err() != nil {
			return failed("connect to "+Redact(b.cfg.URL), err)
		}
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail(&backend.TransportError{Op: "open a channel", Err: err})
	}
	if err := b.declareTopology(ch); err != nil {
		return fail(err)
	}
	b.mu.Lock()
	queues := make([]backend.QueueConfig, 0, len(b.declared))
	for _, q := range b.declared {
		queues = append(queues, q)
	}
	b.mu.Unlock()
	for _, q := range queues {
		if err := b.declareQueue(ch, q); err != nil {
			return fail(err)
		}
	}
	ch.Close()
	l := &link{conn: conn, sock: sock, log: b.log}
	pub, err := newPublisher(l)
	if err != nil {
		return fail(err)
	}
	if !unwatch() {
		conn.Close() // ctx ended and closed the socket
		return failed("connect to "+Redact(b.cfg.URL), ctx.Err())
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		conn.Close()
		return backend.ErrShutDown
	}
	b.link, b.pub = l, pub
	close(b.connected)
	b.tasks.add()
	b.mu.Unlock()
	go b.watch(closes)
	return nil
}

// watch waits for the connection to close and, unless the backend was closed,
// reconnects with jittered backoff.
func (b *Backend) watch(closes chan *amqp.Error) {
	defer b.tasks.done()
	var reason *amqp.Error
	select {
	case reason = <-closes:
	case <-b.done:
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.connected = make(chan struct{})
	b.link, b.pub = nil, nil
	b.mu.Unlock()
	b.log.Warn("RabbitMQ connection lost; reconnecting", "url", Redact(b.cfg.URL), "reason", reason)
	p := backoff.Policy{Base: b.cfg.ReconnectMin, Cap: b.cfg.ReconnectMax, Jitter: backoff.Equal}
	// A pause before the first attempt too: the broker has just gone.
	if backoff.Sleep(b.ctx, p.Delay(1)) != nil {
		return
	}
	backoff.Retry(b.ctx, p, func(ctx context.Context, attempt int) error {
		err := b.connect(ctx)
		switch {
		case err == nil:
			b.log.Info("RabbitMQ connection restored", "url", Redact(b.cfg.URL), "attempts", attempt)
			return nil
		case errors.Is(err, backend.ErrShutDown), ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		b.log.Warn("RabbitMQ reconnection failed", "attempt", attempt, "error", err)
		return err
	})
}

// current waits for a connection and returns it with its publisher.
func (b *Backend) current(ctx context.Context) (*link, *publisher, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, nil, backend.ErrShutDown
		}
		l, pub, connected := b.link, b.pub, b.connected
		b.mu.Unlock()
		if l != nil {
			return l, pub, nil
		}
		select {
		case <-connected:
		case <-b.done:
			return nil, nil, backend.ErrShutDown
		case <-ctx.Done():
			return nil, nil, &backend.TransportError{Op: "wait for the RabbitMQ connection", Err: ctx.Err()}
		}
	}
}

// delayExchange names level's exchange and queue. The unit is in the name: a queue's
// TTL can never change once declared, so hosts with different units use different
// chains on one broker.
func (b *Backend) delayExchange(level int) string {
	return fmt.Sprintf("%s.delay.%dms.%d", b.cfg.Prefix, b.cfg.Unit.Milliseconds(), level)
}
func (b *Backend) deliverExchange() string { return b.cfg.Prefix + ".deliver" }

// DeadQueue names the queue holding q's dead letters.
func DeadQueue(q string) string { return q + ".dead" }

// declareTopology declares the delay chain and the delivery exchange.
func (b *Backend) declareTopology(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(b.deliverExchange(), "topic", true, false, false, false, nil); err != nil {
		return &backend.TransportError{Op: "declare exchange " + b.deliverExchange(), Err: err}
	}
	n := b.cfg.Levels
	for k := 0; k < n; k++ {
		ex := b.delayExchange(k)
		if err := ch.ExchangeDeclare(ex, "topic", true, false, false, false, nil); err != nil {
			return &backend.TransportError{Op: "declare exchange " + ex, Err: err}
		}
		next := b.deliverExchange()
		if k > 0 {
			next = b.delayExchange(k - 1)
		}
		unit := b.cfg.Unit.Milliseconds()
		if _, err := ch.QueueDeclare(ex, true, false, false, false, amqp.Table{
			"x-message-ttl":          int64(1<<k) * unit,
			"x-dead-letter-exchange": next,
			"x-queue-mode":           "lazy",
		}); err != nil {
			return &backend.TransportError{Op: "declare delay queue " + ex, Err: err}
		}
		skip := strings.Repeat("*.", n-1-k)
		if err := ch.QueueBind(ex, skip+"1.#", ex, false, nil); err != nil {
			return &backend.TransportError{Op: "bind delay queue " + ex, Err: err}
		}
		if err := ch.ExchangeBind(next, skip+"0.#", ex, false, nil); err != nil {
			return &backend.TransportError{Op: "bind exchange " + next + " to " + ex, Err: err}
		}
	}
	return nil
}

// queueArgs are the arguments of a work queue.
func queueArgs(q backend.QueueConfig) amqp.Table {
	if q.PriorityLevels == 0 {
		return nil
	}
	return amqp.Table{"x-max-priority": int32(q.PriorityLevels)}
}

// declareQueue declares q's work and dead-letter queues and binds q to the delivery
// exchange.
func (b *Backend) declareQueue(ch *amqp.Channel, q backend.QueueConfig) error {
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, queueArgs(q)); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return fmt.Errorf("queue %q exists on the broker with other arguments than wanted (%v): %w; delete it or declare it as it is",
				q.Name, queueArgs(q), &backend.TransportError{Op: "declare", Queue: q.Name, Err: err})
		}
		return &backend.TransportError{Op: "declare", Queue: q.Name, Err: err}
	}
	if _, err := ch.QueueDeclare(DeadQueue(q.Name), true, false, false, false, nil); err != nil {
		return &backend.TransportError{Op: "declare", Queue: DeadQueue(q.Name), Err: err}
	}
	key := strings.Repeat("*.", b.cfg.Levels) + q.Name
	if err := ch.QueueBind(q.Name, key, b.deliverExchange(), false, nil); err != nil {
		return &backend.TransportError{Op: "bind", Queue: q.Name, Err: err}
	}
	return nil
}

// Declare creates the queue q.Name, durable, with q's priority levels, its dead-letter
// queue, and its binding to the delay chain. A queue that exists with other arguments
// fails with an error that says so.
func (b *Backend) Declare(ctx context.Context, q backend.QueueConfig) error {
	if err := backend.ValidateQueueName(q.Name); err != nil {
		return err
	}
	q = q.Normalize(b.log)
	if _, err := onChannel(ctx, b, "declare "+q.Name, func(_ context.Context, ch *amqp.Channel) (struct{}, error) {
		return struct{}{}, b.declareQueue(ch, q)
	}); err != nil {
		return err
	}
	b.mu.Lock()
	b.declared[q.Name], b.known[q.Name] = q, true
	b.mu.Unlock()
	return nil
}

// exists reports whether the queue exists on the broker, asking it once per queue.
func (b *Backend) exists(ctx context.Context, queue string) error {
	b.mu.Lock()
	known := b.known[queue]
	b.mu.Unlock()
	if known {
		return nil
	}
	if backend.ValidateQueueName(queue) != nil {
		return backend.UnknownQueue(queue)
	}
	if _, err := onChannel(ctx, b, "check "+queue, func(_ context.Context, ch *amqp.Channel) (amqp.Queue, error) {
		return ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	}); err != nil {
		var te *backend.TransportError
		if errors.As(err, &te) {
			return err
		}
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return backend.UnknownQueue(queue)
		}
		return &backend.TransportError{Op: "check", Queue: queue, Err: err}
	}
	b.mu.Lock()
	b.known[queue] = true
	b.mu.Unlock()
	return nil
}

// Publish puts env on env.Queue, after delay rounded up to the unit.
func (b *Backend) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.send(ctx, env, delay)
}

// Defer holds env for delay, then puts it on env.Queue; the caller raised its priority.
func (b *Backend) Defer(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	return b.send(ctx, env, delay)
}

// send publishes env to its queue, straight or through the delay chain, and waits for
// the broker's confirm.
func (b *Backend) send(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	if err := b.exists(ctx, env.Queue); err != nil {
		return err
	}
	units := int64(backend.RoundUp(delay, b.cfg.Unit) / b.cfg.Unit)
	if max := int64(1)<<b.cfg.Levels - 1; units > max {
		return fmt.Errorf("%w: delay %v of a job for queue %q passes the longest delay this backend holds, %v", backend.ErrDelayTooLong, delay, env.Queue, b.MaxDelay())
	}
	msg := encode(env)
	exchange, key := "", env.Queue
	if units > 0 {
		var sb strings.Builder
		for k := b.cfg.Levels - 1; k >= 0; k-- {
			sb.WriteByte('0' + byte(units>>k&1))
			sb.WriteByte('.')
		}
		sb.WriteString(env.Queue)
		exchange, key = b.delayExchange(b.cfg.Levels-1), sb.String()
	}
	_, pub, err := b.current(ctx)
	if err != nil {
		return err
	}
	if err := pub.publish(ctx, exchange, key, msg); err != nil {
		return &backend.TransportError{Op: "publish", Queue: env.Queue, Err: err}
	}
	return nil
}

// Close ends every stream (the broker requeues what they hold), waits for outstanding
// confirms, and closes the connection.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	b.cancel()
	l := b.link
	b.link, b.pub = nil, nil
	b.mu.Unlock()
	var err error
	if l != nil {
		// Close waits for the broker's close-ok; a broker that does not answer would
		// hold it until the heartbeat check gives up. When ctx ends, closing the socket
		// ends the wait, and with it every call still under way on the connection.
		unwatch := context.AfterFunc(ctx, func() { l.sock.Close() })
		err = l.conn.Close()
		unwatch()
	}
	if werr := b.tasks.wait(ctx); werr != nil {
		return fmt.Errorf("rabbitmq backend close: waiting for streams: %w", werr)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("rabbitmq backend close: the broker did not answer in time, connection dropped: %w", ctx.Err())
	}
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return &backend.TransportError{Op: "close", Err: err}
	}
	return nil
}

// QueueStats implements backend.StatsReader: the broker counts ready messages and dead
// letters; unacknowledged, delayed and deferred ones it cannot tell per queue (-1).
func (b *Backend) QueueStats(ctx context.Context, queue string) (backend.QueueStats, error) {
	st := backend.QueueStats{Unacked: -1, Delayed: -1, Deferred: -1}
	// A channel each: a 404 closes the channel it happens on.
	passive := func(name string) (amqp.Queue, error) {
		return onChannel(ctx, b, "inspect "+name, func(_ context.Context, ch *amqp.Channel) (amqp.Queue, error) {
			return ch.QueueDeclarePassive(name, true, false, false, false, nil)
		})
	}
	q, err := passive(queue)
	if err != nil {
		return st, unknownOr(queue, err)
	}
	st.Pending = q.Messages
	dq, err := passive(DeadQueue(queue))
	if err != nil {
		return st, unknownOr(queue, err)
	}
	st.Dead = dq.Messages
	return st, nil
}

// unknownOr maps a broker's 404 to the unknown-queue error.
func unknownOr(queue string, err error) error {
	var te *backend.TransportError
	if errors.As(err, &te) {
		return err
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return backend.UnknownQueue(queue)
	}
	return &backend.TransportError{Op: "inspect", Queue: queue, Err: err}
}
