package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/testbroker"
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
			sctx, scancel := context.WithCancel(context.Background())
			defer scancel()
			s, err := b.Consume(sctx, q)
			if err != nil {
				t.Fatal(err)
			}
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
