// Package rabbitmq is the backend contract over RabbitMQ (AMQP 0-9-1), for hosts that
// share queues: several `wasmjobs run` consume the same queues of one broker.
//
// Topology (see RATIONALE.md):
//   - a work queue per queue name Q: durable, classic with x-max-priority when the queue
//     has priority levels, or quorum (Config.QueueType), which has no priorities;
//     messages are persistent;
//   - Q.dead holds Q's dead letters, each with its reason in a header, of Q's type;
//   - delays go through a binary chain shared by every queue: Levels topic exchanges
//     PREFIX.delay.UNITms.K and queues of the same names with x-message-ttl = 2^K units, each
//     dead-lettering into the level below, level 0 into the exchange PREFIX.deliver, to
//     which every work queue is bound. A delay, rounded up to whole units, is written as
//     Levels binary digits in the routing key, most significant first, followed by the
//     queue's name; level K routes a 1 in its digit into its queue and a 0 straight on.
//     Every message of a level queue has the same TTL, so none waits behind another.
//     The quorum chain is named PREFIX.delay-quorum.UNITms.K and dead-letters at least
//     once (x-dead-letter-strategy at-least-once, x-overflow reject-publish): a job is
//     never lost between two levels, even when a node stops.
//
// Several node URLs (Config.URLs) make the backend connect to the first that answers
// and, when its connection is lost, to the next: the nodes of one cluster.
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
	"regexp"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
	"github.com/wasmjobs/wasmjobs/internal/inflight"
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

// QueueType is the kind of RabbitMQ queue a backend declares.
type QueueType string

// The queue types.
const (
	// Classic queues live on one node and have priorities (x-max-priority).
	Classic QueueType = "classic"
	// Quorum queues are replicated over a cluster's nodes by Raft and survive the loss
	// of a minority of them; they have no priorities (RabbitMQ 3.10 refuses
	// x-max-priority on them and ignores a message's priority).
	Quorum QueueType = "quorum"
)

// ParseQueueType parses "classic" or "quorum"; "" is Classic.
func ParseQueueType(s string) (QueueType, error) {
	switch QueueType(s) {
	case "", Classic:
		return Classic, nil
	case Quorum:
		return Quorum, nil
	}
	return "", fmt.Errorf("queue type %q: want classic or quorum", s)
}

// Config configures a RabbitMQ backend.
type Config struct {
	// URL is the broker's, amqp://user:pass@host:port/vhost.
	URL string
	// URLs are more nodes of the same cluster, tried in turn after URL (which may be
	// empty when URLs is not): the backend connects to the first node that answers and,
	// when that connection is lost, tries the next nodes first.
	URLs []string
	// QueueType is the type of the work, dead-letter and delay queues the backend
	// declares. Empty means Classic. Quorum lacks priorities: see Capabilities.
	QueueType QueueType
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
	cfg  Config
	urls []string // URL then URLs
	log  *slog.Logger

	mu        sync.Mutex
	link      *link // the connection; nil while reconnecting
	pub       *publisher
	connected chan struct{} // closed while a connection is up
	declared  map[string]backend.QueueConfig
	known     map[string]bool // queues seen to exist on the broker
	node      int             // index in urls of the node to try first
	// tokenCycle is TokenCycle; the tests shorten it.
	tokenCycle time.Duration
	closed     bool
	done       chan struct{}   // closed by Close
	ctx        context.Context // done at Close: ends a reconnection under way
	cancel     context.CancelFunc
	tasks      inflight.Counter // the connection's watcher and the streams
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.DeadLetterStore = (*Backend)(nil)
	_ backend.StatsReader     = (*Backend)(nil)

	_ backend.CapabilityReporter = (*Backend)(nil)
)

// Redact hides the password of an AMQP URL.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "amqp://(unparsable URL)"
	}
	return u.Redacted()
}

// Open connects to the broker and declares the shared delay topology. It fails if no
// node can be reached, or when ctx ends first, and on a configuration without a URL or
// with an unknown queue type.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var urls []string
	for _, u := range append([]string{cfg.URL}, cfg.URLs...) {
		if u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return nil, errors.New("rabbitmq backend: no broker URL")
	}
	qt, err := ParseQueueType(string(cfg.QueueType))
	if err != nil {
		return nil, fmt.Errorf("rabbitmq backend: %w", err)
	}
	cfg.QueueType = qt
	if qt == Quorum {
		log.Info("RabbitMQ quorum queues: priorities are ignored and deferred jobs wait their turn behind the backlog (see RATIONALE.md)")
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
		cfg:        cfg,
		urls:       urls,
		log:        log,
		tokenCycle: TokenCycle,
		connected:  make(chan struct{}),
		declared:   make(map[string]backend.QueueConfig),
		known:      make(map[string]bool),
		done:       make(chan struct{}),
		ctx:        lifetime,
		cancel:     cancel,
	}
	if err := b.connect(ctx); err != nil {
		cancel()
		return nil, err
	}
	return b, nil
}

// Capabilities implements backend.CapabilityReporter: classic queues have priorities,
// quorum queues have none, and neither bounds the jobs of a key (keyConcurrencyRefused).
func (b *Backend) Capabilities() backend.Capabilities {
	if b.cfg.QueueType == Quorum {
		return 0
	}
	return backend.CapPriority // no key concurrency: see keyConcurrencyRefused
}

// MaxDelay returns the longest delay the backend can hold.
func (b *Backend) MaxDelay() time.Duration {
	return time.Duration(1<<b.cfg.Levels-1) * b.cfg.Unit
}

// connect connects to the first node that answers, starting from b.node, and makes it
// the first to try next time. It is called at Open and by the reconnection loop, and
// ends when ctx does.
func (b *Backend) connect(ctx context.Context) error {
	b.mu.Lock()
	first := b.node
	b.mu.Unlock()
	var errs []error
	for i := range b.urls {
		n := (first + i) % len(b.urls)
		err := b.connectTo(ctx, n)
		if err == nil || errors.Is(err, backend.ErrShutDown) || ctx.Err() != nil || isRefusal(err) {
			return err
		}
		errs = append(errs, err)
		if len(b.urls) > 1 {
			b.log.Warn("RabbitMQ node unreachable; trying the next", "url", Redact(b.urls[n]), "error", err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return &backend.TransportError{Op: fmt.Sprintf("connect to any of %d nodes", len(b.urls)), Err: errors.Join(errs...)}
}

// isRefusal reports whether err is the broker refusing what the backend declares (a
// queue of another type or other arguments): another node of the cluster would refuse
// it too.
func isRefusal(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed
}

// connectTo dials node n, declares the topology and the declared queues, and opens the
// publisher. It ends when ctx does, whatever the broker does: the dial takes ctx, and
// until the connection is in place ctx's end closes its socket, which ends the
// handshake and any declaration waiting on a broker that does not answer.
func (b *Backend) connectTo(ctx context.Context, n int) error {
	url := b.urls[n]
	var sock *watchedConn // kept: closing it ends any call on the connection
	unwatch := func() bool { return true }
	handshake := dialHandshake(ctx)
	dial := func(network, addr string) (net.Conn, error) {
		c, err := handshake(network, addr)
		if err != nil {
			return nil, err
		}
		// ctx's own end closes the socket, so that the error is ctx's, not a socket
		// timeout that races it.
		unwatch = context.AfterFunc(ctx, func() { c.Close() })
		sock = newWatchedConn(c)
		return sock, nil
	}
	failed := func(op string, err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return &backend.TransportError{Op: op, Err: err}
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: heartbeat, Locale: "en_US", Dial: dial})
	if err != nil {
		unwatch()
		return failed("connect to "+Redact(url), err)
	}
	fail := func(err error) error {
		unwatch()
		conn.Close()
		if ctx.Err() != nil {
			return failed("connect to "+Redact(url), err)
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
	l := &link{conn: conn, sock: sock, log: b.log, url: url}
	pub, err := newPublisher(l)
	if err != nil {
		return fail(err)
	}
	if !unwatch() {
		conn.Close() // ctx ended and closed the socket
		return failed("connect to "+Redact(url), ctx.Err())
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		conn.Close()
		return backend.ErrShutDown
	}
	b.link, b.pub, b.node = l, pub, n
	close(b.connected)
	b.tasks.Add()
	b.mu.Unlock()
	go b.watch(closes)
	return nil
}

// watch waits for the connection to close and, unless the backend was closed,
// reconnects with jittered backoff.
func (b *Backend) watch(closes chan *amqp.Error) {
	defer b.tasks.Done()
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
	lost := b.link.url
	b.connected = make(chan struct{})
	b.link, b.pub = nil, nil
	b.node = (b.node + 1) % len(b.urls) // another node first: this one may be gone
	b.mu.Unlock()
	b.log.Warn("RabbitMQ connection lost; reconnecting", "url", Redact(lost), "reason", reason)
	p := backoff.Policy{Base: b.cfg.ReconnectMin, Cap: b.cfg.ReconnectMax, Jitter: backoff.Equal}
	// A pause before the first attempt too: the broker has just gone.
	if backoff.Sleep(b.ctx, p.Delay(1)) != nil {
		return
	}
	backoff.Retry(b.ctx, p, func(ctx context.Context, attempt int) error {
		err := b.connect(ctx)
		switch {
		case err == nil:
			b.log.Info("RabbitMQ connection restored", "url", Redact(b.currentURL()), "attempts", attempt)
			return nil
		case errors.Is(err, backend.ErrShutDown), ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		b.log.Warn("RabbitMQ reconnection failed", "attempt", attempt, "error", err)
		return err
	})
}

// currentURL is the URL of the node connected to, or "" while none is.
func (b *Backend) currentURL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.link == nil {
		return ""
	}
	return b.link.url
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
// The quorum chain has names of its own: a queue's type never changes either.
func (b *Backend) delayExchange(level int) string {
	kind := "delay"
	if b.cfg.QueueType == Quorum {
		kind = "delay-quorum"
	}
	return fmt.Sprintf("%s.%s.%dms.%d", b.cfg.Prefix, kind, b.cfg.Unit.Milliseconds(), level)
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
		if _, err := ch.QueueDeclare(ex, true, false, false, false, b.delayArgs(k, next)); err != nil {
			return b.declareError(ex, b.delayArgs(k, next), err)
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

// delayArgs are the arguments of the delay queue of level k, which dead-letters into
// the exchange next. A classic one is lazy (its messages wait on disk). A quorum one
// dead-letters at least once: the broker keeps a message in the level until the next
// level has taken it, which needs x-overflow reject-publish (RabbitMQ 3.10 falls back to
// at-most-once without it, logging a warning); with no length limit set, nothing is
// ever rejected.
func (b *Backend) delayArgs(k int, next string) amqp.Table {
	ttl := int64(1<<k) * b.cfg.Unit.Milliseconds()
	if b.cfg.QueueType == Quorum {
		return amqp.Table{
			"x-queue-type":           string(Quorum),
			"x-message-ttl":          ttl,
			"x-dead-letter-exchange": next,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		}
	}
	return amqp.Table{"x-message-ttl": ttl, "x-dead-letter-exchange": next, "x-queue-mode": "lazy"}
}

// queueArgs are the arguments of a work queue. A quorum queue has no x-max-priority
// (refused) and no x-delivery-limit (see RATIONALE.md: requeues that are no fault of
// the job's would count).
func (b *Backend) queueArgs(q backend.QueueConfig) amqp.Table {
	if b.cfg.QueueType == Quorum {
		return amqp.Table{"x-queue-type": string(Quorum)}
	}
	if q.PriorityLevels == 0 {
		return nil
	}
	return amqp.Table{"x-max-priority": int32(q.PriorityLevels)}
}

// deadArgs are the arguments of a dead-letter queue.
func (b *Backend) deadArgs() amqp.Table {
	if b.cfg.QueueType == Quorum {
		return amqp.Table{"x-queue-type": string(Quorum)}
	}
	return nil
}

// RabbitMQ's refusals (406) of a queue declared again with other arguments name the
// first argument that differs, and what the queue has: "inequivalent arg 'x-queue-type'
// ... but current is none" (a classic queue) or "... current is the value 'quorum' ...";
// "inequivalent arg 'x-max-priority' ... but current is the value '2' ..." (only classic
// queues have priorities).
var (
	currentType     = regexp.MustCompile(`inequivalent arg 'x-queue-type'.* but current is (none|the value '([a-z]+)')`)
	currentPriority = regexp.MustCompile(`inequivalent arg 'x-max-priority'.* but current is the value`)
)

// existingType reads the type of the existing queue from a refusal, or returns "".
func existingType(reason string) string {
	if m := currentType.FindStringSubmatch(reason); m != nil {
		if m[2] != "" {
			return m[2]
		}
		return string(Classic)
	}
	if currentPriority.MatchString(reason) {
		return string(Classic)
	}
	return ""
}

// declareError describes a failed declaration of the queue name with args. A queue
// that exists with another type or other arguments (406) gets an error that says so,
// naming both types when they differ.
func (b *Backend) declareError(name string, args amqp.Table, err error) error {
	te := &backend.TransportError{Op: "declare", Queue: name, Err: err}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return te
	}
	if has := existingType(ae.Reason); has != "" && has != string(b.cfg.QueueType) {
		return fmt.Errorf("queue %q exists on the broker as a %s queue, and this backend declares %s queues: %w; a queue's type never changes: "+
			"use the queue type it has, or delete the queue (its jobs with it) and declare it again", name, has, b.cfg.QueueType, te)
	}
	return fmt.Errorf("queue %q exists on the broker with other arguments than wanted (%v): %w; delete it or declare it as it is", name, args, te)
}

// declareQueue declares q's work and dead-letter queues and binds q to the delivery
// exchange.
func (b *Backend) declareQueue(ch *amqp.Channel, q backend.QueueConfig) error {
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, b.queueArgs(q)); err != nil {
		return b.declareError(q.Name, b.queueArgs(q), err)
	}
	if _, err := ch.QueueDeclare(DeadQueue(q.Name), true, false, false, false, b.deadArgs()); err != nil {
		return b.declareError(DeadQueue(q.Name), b.deadArgs(), err)
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
	if q.KeyConcurrency > 0 {
		return keyConcurrencyRefused(q)
	}
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
		return unknownOr("check", queue, err)
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
	if werr := b.tasks.Wait(ctx); werr != nil {
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
		return st, unknownOr("inspect", queue, err)
	}
	st.Pending = q.Messages
	dq, err := passive(DeadQueue(queue))
	if err != nil {
		return st, unknownOr("inspect", queue, err)
	}
	st.Dead = dq.Messages
	return st, nil
}

// unknownOr maps a broker's 404 to the unknown-queue error, and any other error but a
// TransportError to a TransportError of op.
func unknownOr(op, queue string, err error) error {
	var te *backend.TransportError
	if errors.As(err, &te) {
		return err
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return backend.UnknownQueue(queue)
	}
	return &backend.TransportError{Op: op, Queue: queue, Err: err}
}

// dialHandshake returns a dial function for amqp.Config that dials within ctx and
// gives the connection handshakeTimeout for its handshake: heartbeats start after it,
// so until then a deadline guards it, as amqp091-go's own dialer does (amqp091-go
// clears the deadline once the connection opens).
func dialHandshake(ctx context.Context) func(network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	return func(network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// ErrKeyConcurrency is wrapped by the error of a queue declared or consumed with
// QueueConfig.KeyConcurrency: a broker cannot bound the running jobs of a key.
var ErrKeyConcurrency = errors.New("key_concurrency is not supported on RabbitMQ")

// keyConcurrencyRefused is the error of a queue asking for a bound per key, saying
// why a broker cannot keep it.
func keyConcurrencyRefused(q backend.QueueConfig) error {
	return fmt.Errorf("queue %q with key concurrency %d: %w: the hosts consuming a queue share no state per key, "+
		"a retry goes through the delay chain, where the key's next job overtakes it, and single-active-consumer "+
		"hands a queue over while the jobs of the last consumer still run; use the pebble or memory backend, "+
		"or drop key_concurrency from the manifest", q.Name, q.KeyConcurrency, ErrKeyConcurrency)
}
