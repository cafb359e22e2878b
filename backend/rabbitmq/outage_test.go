package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// silentBroker accepts TCP connections and never answers: a broker that hangs.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "amqp://guest:guest@" + ln.Addr().String() + "/"
}

// within runs f and fails the test unless it returns within limit, a bound far above
// what f should take and far below the wait the bug it guards against would take.
func within(t *testing.T, what string, limit time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// TestOpenEndsWithItsContext: Open on a broker that accepts the connection and never
// answers returns when its context ends, not at the end of the 30 s handshake timeout.
func TestOpenEndsWithItsContext(t *testing.T) {
	t.Parallel()
	url := silentBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	within(t, "Open on a silent broker with a 200ms context", 10*time.Second, func() {
		b, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: url})
		if err == nil {
			b.Close(context.Background())
			t.Error("Open succeeded on a silent broker")
			return
		}
		var te *backend.TransportError
		if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Open: %v, want a transport error that wraps the deadline", err)
		}
	})
}

// TestStreamEndsDuringAnOutage: with the broker unreachable, a stream that waits to
// consume again still ends when it is dropped or its context ends, and the backend
// still closes.
func TestStreamEndsDuringAnOutage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		end  func(s backend.Stream, cancel context.CancelFunc, b *rabbitmq.Backend)
		want error
	}{
		{"drop", func(s backend.Stream, _ context.CancelFunc, _ *rabbitmq.Backend) { s.Drop() }, nil},
		{"context", func(s backend.Stream, cancel context.CancelFunc, _ *rabbitmq.Backend) {
			cancel()
			for range s.Deliveries() {
			}
		}, context.Canceled},
		{"close", func(s backend.Stream, _ context.CancelFunc, b *rabbitmq.Backend) {
			b.Close(context.Background())
			for range s.Deliveries() {
			}
		}, backend.ErrShutDown},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			px := testbroker.NewProxy(t, brokerURL(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: px.URL(brokerURL(t)), ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			q := uniqueQueue(t)
			if err := b.Declare(ctx, q); err != nil {
				t.Fatal(err)
			}
			s, scancel := consumeCancelable(t, context.Background(), b, q)
			px.Cut()
			// Wait until the backend knows the connection is lost (a publish then waits
			// for a connection until its context ends), twice over, so that the stream,
			// which tries to consume again within 50 ms, is waiting for the connection.
			for lost := 0; lost < 2; {
				pctx, pcancel := context.WithTimeout(ctx, 250*time.Millisecond)
				err := b.Publish(pctx, backend.NewEnvelope(q.Name, nil), 0)
				pcancel()
				switch {
				case err == nil:
					t.Fatal("a publish through a cut proxy succeeded")
				case errors.Is(err, context.DeadlineExceeded):
					lost++
				}
			}
			within(t, "ending the stream during the outage", 10*time.Second, func() { c.end(s, scancel, b) })
			if err := s.Err(); !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
				t.Fatalf("stream error %v, want %v", err, c.want)
			}
			within(t, "closing the backend during the outage", 10*time.Second, func() { b.Close(context.Background()) })
		})
	}
}

// frozen opens a backend through a proxy of the test's own, declares a queue, and
// returns them with the proxy, not yet frozen. The backend is closed with the test.
func frozen(t *testing.T) (*rabbitmq.Backend, backend.QueueConfig, *testbroker.Proxy) {
	t.Helper()
	return frozenWith(t, rabbitmq.Config{})
}

// frozenWith is frozen with cfg (its URL is the proxy's).
func frozenWith(t *testing.T, cfg rabbitmq.Config) (*rabbitmq.Backend, backend.QueueConfig, *testbroker.Proxy) {
	t.Helper()
	px := testbroker.NewProxy(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.URL = px.URL(brokerURL(t))
	b, err := rabbitmq.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		b.Close(cctx)
	})
	q := uniqueQueue(t)
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	return b, q, px
}

// frozenMargin is what a call may take past its context on a frozen broker: far below
// amqp091-go's 30 s heartbeat check, which ended such calls before.
const frozenMargin = 2 * time.Second

// TestCallsEndWithTheirContextOnAFrozenBroker: with the broker hanging (connections
// open, nothing answered), every call returns within its context plus a small margin:
// a settle, a publish that must first check its queue, a Consume, a Drop (the stream's
// context bounds it), and Close.
func TestCallsEndWithTheirContextOnAFrozenBroker(t *testing.T) {
	t.Parallel()
	b, q, px := frozen(t)
	other := uniqueQueue(t) // declared elsewhere: b must ask the broker whether it exists
	direct := open(t, rabbitmq.Config{})
	defer direct.Close(context.Background())
	if err := direct.Declare(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), backend.NewEnvelope(q.Name, []byte("x")), 0); err != nil {
		t.Fatal(err)
	}
	s, scancel := consumeCancelable(t, context.Background(), b, q)
	d := <-s.Deliveries()
	px.Freeze()

	const limit = 300 * time.Millisecond
	bounded := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		var err error
		within(t, what+" on a frozen broker", limit+frozenMargin, func() { err = f(ctx) })
		if err == nil {
			t.Errorf("%s on a frozen broker succeeded", what)
		}
	}
	bounded("a settle (retry)", func(ctx context.Context) error {
		env, _ := d.Envelope()
		return d.Retry(ctx, env, 0)
	})
	bounded("a publish to a queue not yet checked", func(ctx context.Context) error {
		return b.Publish(ctx, backend.NewEnvelope(other.Name, nil), 0)
	})
	bounded("a Consume", func(ctx context.Context) error {
		s2, err := b.Consume(ctx, q)
		if err == nil {
			s2.Drop()
		}
		return err
	})
	bounded("QueueStats", func(ctx context.Context) error { _, err := b.QueueStats(ctx, q.Name); return err })
	within(t, "a Drop whose stream's context ends, on a frozen broker", limit+frozenMargin, func() {
		time.AfterFunc(limit, scancel)
		s.Drop()
	})
	bounded("Close", func(ctx context.Context) error { return b.Close(ctx) })
}

// TestAbandonedCallLeavesNothingBehind: a call whose context ended while the broker
// hangs returns at once, and the goroutine running the library call for it is gone
// within AnswerGrace (nothing is read from the broker since, so the connection is torn
// down), not at amqp091-go's heartbeat check 30 s later. The backend reconnects only after a minute, so that the goroutines of a
// new connection do not mix with the one looked for.
// Not parallel: goleak must see this test's goroutines only.
func TestAbandonedCallLeavesNothingBehind(t *testing.T) {
	b, q, px := frozenWith(t, rabbitmq.Config{ReconnectMin: time.Minute, ReconnectMax: time.Minute})
	before := goleak.IgnoreCurrent()
	px.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var err error
	within(t, "QueueStats on a frozen broker", 100*time.Millisecond+frozenMargin, func() { _, err = b.QueueStats(ctx, q.Name) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("QueueStats on a frozen broker: %v, want the deadline", err)
	}
	abandoned := time.Now()
	limit := rabbitmq.AnswerGrace + frozenMargin
	for {
		err := goleak.Find(before)
		if err == nil {
			t.Logf("the abandoned call's goroutine ended %v after its context", time.Since(abandoned).Round(10*time.Millisecond))
			return
		}
		if time.Since(abandoned) > limit {
			t.Fatalf("%v after its context ended, the abandoned call is still under way (grace %v): %v", limit, rabbitmq.AnswerGrace, err)
		}
	}
}

// TestSlowBrokerKeepsItsConnection: calls abandoned on a broker that is slow but alive
// leave its connection alone. The broker's every byte, its heartbeats too, comes 7 s
// late (longer than an answer may take in a quorum leader election, say); meanwhile
// inspections give up after 100 ms, as a dashboard request does when its tab closes,
// and a stream ends by its context, as the worker ends its streams, which abandons its
// channel's close at once. A delivery held on another stream must still be acked when
// the answers have come: a teardown of the connection would have put it back (and every
// other stream's) and failed the ack. Before, the connection was torn down 5 s after a
// caller gave up on an answer.
func TestSlowBrokerKeepsItsConnection(t *testing.T) {
	t.Parallel()
	const lag = 7 * time.Second
	b, q, px := frozen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Publish(ctx, backend.NewEnvelope(q.Name, []byte("x")), 0); err != nil {
		t.Fatal(err)
	}
	held, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Drop()
	d := <-held.Deliveries()
	ended, scancel := consumeCancelable(t, ctx, b, q)

	px.Lag(lag)
	abandoned := time.Now()
	for range 3 {
		ictx, icancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := b.QueueStats(ictx, q.Name)
		icancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("QueueStats on a broker %v late: %v, want the deadline", lag, err)
		}
	}
	scancel()
	within(t, "a stream ending by its context on a slow broker", frozenMargin, func() {
		for range ended.Deliveries() {
		}
	})
	// Past the answers' arrival, and past the 5 s after which the connection was torn
	// down before.
	time.Sleep(time.Until(abandoned.Add(lag + 2*time.Second)))
	px.Lag(0)
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack of a delivery held while the broker was slow: %v (the connection was torn down)", err)
	}
}

// TestStuckPublishEndsWithItsContext: a publish whose write the broker does not take
// (it stopped reading: the socket buffers fill) returns within its context plus the
// grace after which the connection is torn down; the backend then closes at once.
func TestStuckPublishEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b, q, px := frozen(t)
	px.Freeze()
	big := make([]byte, 64<<20) // more than the socket buffers hold
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var err error
	within(t, "a publish stuck in its write", 300*time.Millisecond+frozenMargin, func() {
		err = b.Publish(ctx, backend.NewEnvelope(q.Name, big), 0)
	})
	if err == nil {
		t.Fatal("a 64 MB publish through a frozen broker succeeded")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	within(t, "Close after a stuck publish", 300*time.Millisecond+frozenMargin, func() { b.Close(cctx) })
}

// TestStaleReturnIsNotTakenForALaterPublish: ids repeat (a retry keeps its job's id,
// children keep theirs). A publish that gave up before the broker returned its message
// must not leave that return for a later publish of the same id, which reached its
// queue, to report as "no queue took the message".
func TestStaleReturnIsNotTakenForALaterPublish(t *testing.T) {
	t.Parallel()
	b, q, px := frozen(t)
	gone := uniqueQueue(t)
	if err := b.Declare(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	// Delete it behind b's back: b still knows it, so a publish to it is returned.
	_, ch := amqpChannel(t, brokerURL(t))
	if _, err := ch.QueueDelete(gone.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	env := backend.NewEnvelope(gone.Name, []byte("first"))
	px.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.Publish(ctx, env, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish on a frozen broker: %v, want the deadline", err)
	}
	px.Thaw()
	// The broker now returns the first message. A confirmed publish after it proves the
	// return has arrived: the broker answers a channel's publishes in order.
	if err := b.Publish(context.Background(), backend.NewEnvelope(q.Name, nil), 0); err != nil {
		t.Fatal(err)
	}
	again := env
	again.Queue, again.Payload = q.Name, []byte("again")
	if err := b.Publish(context.Background(), again, 0); err != nil {
		t.Fatalf("publish of a reused id to a queue that exists: %v", err)
	}
}

// consumeCancelable starts a stream of q under a context of its own, derived from
// parent, and returns it with the context's cancel, which the test calls to end the
// stream (and which runs at the end regardless).
func consumeCancelable(t *testing.T, parent context.Context, b backend.Backend, q backend.QueueConfig) (backend.Stream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	t.Cleanup(cancel)
	s, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	return s, cancel
}
