package rabbitmq

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
)

// stuckGrace is how long a write to the broker may outlive its caller's context before
// the connection is torn down. A write normally takes microseconds; a broker that stops
// reading (frozen, or blocking publishers) holds it for as long as it likes. The grace
// spares a healthy connection a context that ends during one of its ordinary writes.
const stuckGrace = 250 * time.Millisecond

// heartbeat is the connection's heartbeat. RabbitMQ checks every heartbeat/2 (5 s)
// whether it sent anything since its last check, and sends a heartbeat frame when it
// did not: on a live connection a byte comes from the broker about every heartbeat/2
// when it is idle, and every heartbeat at the longest (after a frame sent just past a
// check; measured 9.7 s).
const heartbeat = 10 * time.Second

// answerGrace is how long the broker may stay silent (nothing read from it) while a
// call that waits for its answer goes on after its caller gave up on it (see
// link.abandoned), before the connection is torn down. Silence that long means a broker
// that hangs: it is half again the longest gap a live broker leaves between two frames
// (heartbeat), so that a heartbeat late by a few seconds on a busy broker, or on a busy
// host that reads it late, is not taken for one, and it is half amqp091-go's own check
// (30 s of silence). A broker that is only slow keeps sending heartbeats, so a call it
// answers late is left to finish: a teardown would cost every stream of the connection
// its deliveries (the broker requeues them) and fail their acks.
const answerGrace = heartbeat * 3 / 2

// link is one connection to the broker with the socket under it. amqp091-go takes no
// context in its calls; closing the socket is what ends every one of them (each then
// fails), whatever the broker does.
type link struct {
	conn *amqp.Connection
	sock *watchedConn
	log  *slog.Logger
	url  string // the node's
}

// watchedConn is a connection's socket that records when a read last returned bytes,
// so that the backend can tell a broker gone silent from a slow one.
type watchedConn struct {
	net.Conn
	start    time.Time    // monotonic: a wall clock that jumps fakes no silence
	lastRead atomic.Int64 // since start, of the last read that returned bytes
}

func newWatchedConn(c net.Conn) *watchedConn { return &watchedConn{Conn: c, start: time.Now()} }

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(time.Since(c.start)))
	}
	return n, err
}

// silence is how long nothing was read from the broker (since the dial, at first).
func (c *watchedConn) silence() time.Duration {
	return time.Since(c.start) - time.Duration(c.lastRead.Load())
}

// abort tears the connection down: its calls fail, and the backend reconnects.
func (l *link) abort(why string, attrs ...any) {
	l.log.Warn("closing the RabbitMQ connection: "+why, attrs...)
	l.sock.Close()
}

// abandoned watches a call whose caller gave up on it until finished is called: if
// the broker is silent for answerGrace meanwhile, the connection is torn down, which
// ends the call. The first check comes answerGrace after the call was abandoned, so
// that it tears down only a connection on which nothing was read since; while the
// broker is heard from, the check comes again answerGrace after the last read. A call
// that a live broker never answers therefore goes on until the broker answers it or
// the connection ends for another reason.
func (l *link) abandoned(what string) (finished func()) {
	var mu sync.Mutex
	done := false
	var t *time.Timer
	check := func() {
		silent := l.sock.silence()
		mu.Lock()
		if done {
			mu.Unlock()
			return
		}
		if silent < answerGrace {
			t.Reset(answerGrace - silent)
			mu.Unlock()
			return
		}
		mu.Unlock()
		l.abort(what+" was still waiting for the broker's answer after its caller gave up, and the broker is silent", "silent_for", silent)
	}
	mu.Lock()
	t = time.AfterFunc(answerGrace, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		done = true
		t.Stop()
		mu.Unlock()
	}
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
			timer = time.AfterFunc(stuckGrace, func() { l.abort(what+" was still under way after its context ended", "after", stuckGrace) })
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
// ends. An abandoned call goes on in its goroutine until the broker answers it, or
// until the broker has been silent for answerGrace: then the connection is torn down
// (link.abandoned), which ends it. release, when not nil, frees what an abandoned call
// returned. what names the call in the log.
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
// ctx ends, whatever the broker does; what it leaves behind is bounded as await says.
// A channel that closes after an error of f (a 404 closes it) is fine: f's error is
// what is returned.
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
