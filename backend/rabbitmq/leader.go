package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Leadership of the schedules. One queue, declared with x-single-active-consumer,
// holds one token message. Every host consumes it; the broker delivers only to the
// active consumer, which holds the token unacknowledged for as long as it leads. When
// its connection ends (the process exits or dies, or its machine stops answering
// heartbeats) the broker requeues the token and makes the next consumer active, which
// then holds it and leads. The token carries the last fired tick of each schedule: the
// leader re-publishes it (publish, confirm, then ack the copy it held) after every
// fired tick and every TokenCycle, so that a new leader continues from the last one's
// ticks and the broker never finds a delivery held past its consumer_timeout.
const (
	// LeaderHeartbeat is the heartbeat of a leadership connection. A leader whose
	// machine died loses the token once the broker misses its heartbeats: about
	// LeaderHeartbeat to twice it (RabbitMQ sends every half timeout and closes after
	// two misses). A leader that exits or is killed loses it at once (its socket
	// closes).
	LeaderHeartbeat = 5 * time.Second
	// TokenCycle is how often a leader re-publishes the token while nothing fires:
	// far below RabbitMQ's default consumer_timeout of 30 minutes.
	TokenCycle = 30 * time.Second
)

// leaderQueue is the token's queue.
func (b *Backend) leaderQueue() string { return b.cfg.Prefix + ".schedules.leader" }

// token is the message that makes its holder the leader.
type token struct {
	// Nonce tells a leader its own re-published token from another copy.
	Nonce string `json:"nonce"`
	// Ticks is the last fired tick of each schedule.
	Ticks map[string]time.Time `json:"ticks"`
}

// Lease is this host's leadership of the schedules: a backend.ScheduleStore whose
// PublishTick publishes the job and then carries the tick in the token. It ends when
// the context given to Lead ends (the token goes to the next host at once) or when its
// connection is lost (Lost is then closed).
type Lease struct {
	b    *Backend
	conn *amqp.Connection
	ch   *amqp.Channel
	lost chan struct{}
	save chan chan error // requests to re-publish the token, served by run

	mu    sync.Mutex
	ticks map[string]time.Time
	keep  map[string]bool // the schedules whose ticks the token carries; nil: all
}

var (
	_ backend.ScheduleStore  = (*Lease)(nil)
	_ backend.SchedulePruner = (*Lease)(nil)
)

// Lead waits until this host holds the schedules' token, and returns its lease. It
// ends with ctx's error when ctx ends first; the lease then ends with ctx too.
func (b *Backend) Lead(ctx context.Context) (*Lease, error) {
	if b.isClosed() {
		return nil, backend.ErrShutDown
	}
	conn, err := b.dialLeader(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // the lease ends with ctx
	fail := func(op string, err error) (*Lease, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &backend.TransportError{Op: op, Queue: b.leaderQueue(), Err: err}
	}
	ch, err := conn.Channel()
	if err != nil {
		return fail("open the leadership channel", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fail("enable confirms on the leadership channel", err)
	}
	// On quorum queues the token survives the loss of a node, as the jobs do: a
	// classic queue on a lost node would stop every schedule until it came back.
	args := amqp.Table{"x-single-active-consumer": true}
	if b.cfg.QueueType == Quorum {
		args["x-queue-type"] = string(Quorum)
	}
	if op, err := b.ensureToken(ctx, ch, ch.QueueDeclare, args, "declare the leadership queue", "publish the first leadership token"); err != nil {
		return fail(op, err)
	}
	// One in flight: the held token. Other copies stay ready in the queue, where
	// mergeReady finds them all, and reach the leader one by one after each cycle.
	if err := ch.Qos(1, 0, false); err != nil {
		return fail("set the leadership channel's prefetch", err)
	}
	deliveries, err := ch.Consume(b.leaderQueue(), "", false, false, false, false, nil)
	if err != nil {
		return fail("consume the leadership queue", err)
	}
	// While waiting, check every token cycle that a token exists: one lost (a purge,
	// a policy's TTL or length limit, a node's disk) would otherwise stop every
	// schedule for good without a word. The leader's held token is never ready, so a
	// waiting host adds a copy each cycle; the leader merges and drops them.
	cycle := time.NewTicker(b.tokenCycle)
	defer cycle.Stop()
	var first amqp.Delivery
wait:
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return fail("wait for the leadership token", errors.New("the channel closed"))
			}
			first = d
			break wait
		case <-cycle.C:
			if op, err := b.ensureToken(ctx, ch, ch.QueueDeclarePassive, args, "count the leadership tokens", "publish a leadership token"); err != nil {
				return fail(op, err)
			}
		case <-ctx.Done():
			return fail("wait for the leadership token", ctx.Err())
		}
	}
	var t token
	if err := json.Unmarshal(first.Body, &t); err != nil {
		b.log.Warn("schedules: leadership token does not decode; starting without ticks", "error", err)
	}
	l := &Lease{b: b, conn: conn, ch: ch, lost: make(chan struct{}), save: make(chan chan error), ticks: t.Ticks}
	if l.ticks == nil {
		l.ticks = map[string]time.Time{}
	}
	// A leader that died between publishing its token and acking the old one left two
	// copies, each with ticks the other may lack: merge them all before the scheduler
	// reads the ticks, or it would fire again what the last leader fired.
	if err := l.mergeReady(args); err != nil {
		return fail("merge the other leadership tokens", err)
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	go l.run(ctx, deliveries, first, closes)
	return l, nil
}

// ensureToken declares the leadership queue with declare (the first declaration, or a
// passive one that counts its messages) and, when no token is ready, publishes one
// without ticks. No token ready means either that none exists (the first host ever,
// or the token was lost) or that the leader holds it: the leader merges each extra
// copy's ticks (the newest of each) and drops it, and a host that takes the leadership
// merges every ready copy before it fires (mergeReady), so an extra copy costs a
// message and never a tick. On an error it returns the failed step's name: declareOp
// or publishOp.
func (b *Backend) ensureToken(ctx context.Context, ch *amqp.Channel,
	declare func(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error),
	args amqp.Table, declareOp, publishOp string) (string, error) {
	q, err := declare(b.leaderQueue(), true, false, false, false, args)
	if err != nil {
		return declareOp, err
	}
	if q.Messages == 0 {
		if err := publishToken(ctx, ch, b.leaderQueue(), token{Nonce: nonce()}); err != nil {
			return publishOp, err
		}
	}
	return "", nil
}

// dialLeader opens the leadership's own connection (its heartbeat is shorter than the
// backend's) to the first node that answers, from the node the backend's connection
// uses, as the backend's connect does.
func (b *Backend) dialLeader(ctx context.Context) (*amqp.Connection, error) {
	dial := dialHandshake(ctx)
	b.mu.Lock()
	first := b.node
	b.mu.Unlock()
	var errs []error
	for i := range b.urls {
		url := b.urls[(first+i)%len(b.urls)]
		conn, err := amqp.DialConfig(url, amqp.Config{Heartbeat: LeaderHeartbeat, Locale: "en_US", Dial: dial,
			Properties: amqp.Table{"connection_name": "wasmjobs schedules leadership"}})
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, &backend.TransportError{Op: "connect for the schedules' leadership to " + Redact(url), Err: err})
		if len(b.urls) > 1 {
			b.log.Warn("schedules: RabbitMQ node unreachable for the leadership; trying the next", "url", Redact(url), "error", err)
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, &backend.TransportError{Op: fmt.Sprintf("connect for the schedules' leadership to any of %d nodes", len(b.urls)), Err: errors.Join(errs...)}
}

// mergeReady takes every token copy ready in the queue (the held one is not), merges
// its ticks into l's and acks it.
func (l *Lease) mergeReady(args amqp.Table) error {
	q, err := l.ch.QueueDeclarePassive(l.b.leaderQueue(), true, false, false, false, args)
	if err != nil {
		return err
	}
	for range q.Messages {
		d, ok, err := l.ch.Get(l.b.leaderQueue(), false)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		l.merge(d.Body)
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	return nil
}

// merge keeps the newest tick of each schedule of l's and the token in body's.
func (l *Lease) merge(body []byte) {
	var t token
	if err := json.Unmarshal(body, &t); err != nil {
		l.b.log.Warn("schedules: a leadership token does not decode; dropped", "error", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range t.Ticks {
		if v.After(l.ticks[k]) {
			l.ticks[k] = v
		}
	}
}

// Lost is closed when the lease ended: ctx ended or the connection was lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// ScheduleTicks returns the ticks the token carried, with those fired since.
func (l *Lease) ScheduleTicks(ctx context.Context) (map[string]time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.ticks), nil
}

// KeepSchedules implements backend.SchedulePruner: the token drops the ticks of every
// other schedule when it is next re-published (after the next fired tick or within a
// TokenCycle), so that it does not carry a removed schedule's last tick for ever. The
// ticks ScheduleTicks returned before are the scheduler's to keep: a schedule set again
// while this host leads still catches up from them.
func (l *Lease) KeepSchedules(schedules []string) {
	keep := make(map[string]bool, len(schedules))
	for _, s := range schedules {
		keep[s] = true
	}
	l.mu.Lock()
	l.keep = keep
	l.mu.Unlock()
}

// PublishTick publishes env, then re-publishes the token with tick. A leader that dies
// between the two leaves the tick to the next one, which fires it again with the same
// id: at most one duplicate per failover.
func (l *Lease) PublishTick(ctx context.Context, schedule string, tick time.Time, env backend.Envelope) error {
	select {
	case <-l.lost:
		return errors.New("the schedules' leadership was lost")
	default:
	}
	if err := l.b.Publish(ctx, env, 0); err != nil {
		return err
	}
	l.mu.Lock()
	l.ticks[schedule] = tick
	l.mu.Unlock()
	reply := make(chan error, 1)
	select {
	case l.save <- reply:
	case <-l.lost:
		return nil // published; the next leader fires the tick again, same id
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		if err != nil {
			l.b.log.Warn("schedules: re-publishing the leadership token failed", "error", err)
		}
		return nil // the job is published either way
	case <-l.lost:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run holds the token: it re-publishes it every TokenCycle and when asked, merges and
// drops other copies, and closes lost when the connection ends.
func (l *Lease) run(ctx context.Context, deliveries <-chan amqp.Delivery, held amqp.Delivery, closes <-chan *amqp.Error) {
	defer close(l.lost)
	defer l.conn.Close()
	holding, expect := true, ""
	cycle := func() error {
		l.mu.Lock()
		if l.keep != nil {
			maps.DeleteFunc(l.ticks, func(s string, _ time.Time) bool { return !l.keep[s] })
		}
		t := token{Nonce: nonce(), Ticks: maps.Clone(l.ticks)}
		l.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := publishToken(pctx, l.ch, l.b.leaderQueue(), t); err != nil {
			return err
		}
		// The new copy is confirmed: let the old one go. Dying between the two leaves
		// two copies, which the next leader merges.
		if holding {
			if err := held.Ack(false); err != nil {
				return err
			}
			holding = false
		}
		expect = t.Nonce
		return nil
	}
	tick := time.NewTicker(l.b.tokenCycle)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-closes:
			if err != nil {
				l.b.log.Warn("schedules: the leadership connection was lost", "error", err)
			}
			return
		case reply := <-l.save:
			err := cycle()
			reply <- err
			if err != nil {
				return // end the lease: the broker hands the token on
			}
		case <-tick.C:
			if err := cycle(); err != nil {
				l.b.log.Warn("schedules: re-publishing the leadership token failed; giving up the leadership", "error", err)
				return
			}
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			var t token
			if json.Unmarshal(d.Body, &t) == nil && t.Nonce == expect && !holding {
				held, holding = d, true
				continue
			}
			// Another copy: keep the newest tick of each schedule, drop the copy.
			l.merge(d.Body)
			if err := d.Ack(false); err != nil {
				return
			}
		}
	}
}

// publishToken publishes t, persistent, and waits for the broker's confirm.
func publishToken(ctx context.Context, ch *amqp.Channel, queue string, t token) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body, MessageId: t.Nonce,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the broker refused the leadership token (nack)")
	}
	return nil
}

func nonce() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
