package rabbitmq

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// stuckGrace is how long a write to the broker may outlive its caller's context before
// the connection is torn down. A write normally takes microseconds; a broker that stops
// reading (frozen, or blocking publishers) holds it for as long as it likes. The grace
// spares a healthy connection a context that ends during one of its ordinary writes.
const stuckGrace = 250 * time.Millisecond

// answerGrace is how long a call that waits for the broker's answer may go on after its
// caller gave up on it (see await) before the connection is torn down. The broker
// answers such a call (open a channel, declare a queue, consume) in milliseconds, or
// seconds when it is busy; one that has not answered this long after the caller gave up
// hangs, and without the teardown the goroutine running the call would wait for
// amqp091-go's heartbeat check, 30 s of silence. It is much longer than stuckGrace
// because a teardown costs every stream of the connection its deliveries (the broker
// requeues them), and a slow answer, unlike a stuck write, leaves the connection of use.
const answerGrace = 5 * time.Second

// link is one connection to the broker with the socket under it. amqp091-go takes no
// context in its calls; closing the socket is what ends every one of them (each then
// fails), whatever the broker does.
type link struct {
	conn *amqp.Connection
	sock net.Conn
	log  *slog.Logger
	url  string // the node's
}

// abort tears the connection down: its calls fail, and the backend reconnects.
func (l *link) abort(why string, after time.Duration) {
	l.log.Warn("closing the RabbitMQ connection: "+why, "after", after)
	l.sock.Close()
}

// abandoned bounds a call whose caller gave up on it: unless finished is called within
// answerGrace, the connection is torn down, which ends the call.
func (l *link) abandoned(what string) (finished func()) {
	t := time.AfterFunc(answerGrace, func() {
		l.abort(what+" was still waiting for the broker's answer after its caller gave up", answerGrace)
	})
	return func() { t.Stop() }
}

// guard bounds a write that takes no context by ctx: if ctx ends and the write is still
// under way stuckGrace later, the connection is torn down, which ends the write. A write
// holds the connection's send lock, so while it is stuck no other frame (acks, other
// publishes, heartbeats) leaves on that connection either: the connection is of no use
// until it ends. Call stop once the write returned.
func (l *link) guard(ctx context.Context, what string) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	var mu sync.Mutex
	var timer *time.Timer
	finished := false
	unwatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			timer = time.AfterFunc(stuckGrace, func() { l.abort(what+" was still under way after its context ended", stuckGrace) })
		}
	})
	return func() {
		if unwatch() {
			return
		}
		mu.Lock()
		finished = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}
}

// await runs call, a library call on l's connection that takes no context and waits
// for the broker's answer, and returns what it returns, or ctx's error as soon as ctx
// ends. An abandoned call goes on in its goroutine until the broker answers, for
// answerGrace at most: then the connection is torn down (link.abandoned), which ends it;
// release, when not nil, then frees what it returned, within the same grace. what names
// the call in the log.
func await[T any](ctx context.Context, l *link, what string, call func() (T, error), release func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	res := make(chan result, 1)
	var mu sync.Mutex
	var finished func() // set once the call is abandoned
	go func() {
		v, err := call()
		mu.Lock()
		done := finished
		if done == nil {
			res <- result{v, err}
		}
		mu.Unlock()
		if done != nil {
			if err == nil && release != nil {
				release(v)
			}
			done()
		}
	}()
	select {
	case r := <-res:
		return r.v, r.err
	case <-ctx.Done():
	}
	done := l.abandoned(what) // armed before the check below, stopped if the call finished meanwhile
	mu.Lock()
	select {
	case r := <-res:
		mu.Unlock()
		done()
		return r.v, r.err
	default:
	}
	finished = done
	mu.Unlock()
	var zero T
	return zero, ctx.Err()
}

// onChannel runs f on a channel of its own of the current connection, then closes the
// channel (which puts back whatever f took without acknowledging it). It returns when
// ctx ends, whatever the broker does, and leaves nothing behind for longer than
// answerGrace: see await. A channel that closes after an error of f (a 404 closes it)
// is fine: f's error is what is returned.
func onChannel[T any](ctx context.Context, b *Backend, op string, f func(ctx context.Context, ch *amqp.Channel) (T, error)) (T, error) {
	var zero T
	l, _, err := b.current(ctx)
	if err != nil {
		return zero, err
	}
	v, err := await(ctx, l, op, func() (T, error) {
		ch, err := l.conn.Channel()
		if err != nil {
			return zero, &backend.TransportError{Op: "open a channel", Err: err}
		}
		defer ch.Close()
		return f(ctx, ch)
	}, nil)
	if err != nil && ctx.Err() != nil && err == ctx.Err() {
		return zero, &backend.TransportError{Op: op + ": waiting for the broker's answer", Err: err}
	}
	return v, err
}

// group counts goroutines and waits for them with a context, leaving nothing behind
// when the context ends first.
type group struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n reaches zero; nil when nobody waits
}

func (g *group) add() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *group) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// wait returns when the count is zero, or ctx's error when ctx ends first.
func (g *group) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
