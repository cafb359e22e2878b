package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// amqpChannel dials url and opens a channel, for a test that works the broker behind
// the backend's back; the connection is closed when tb ends.
func amqpChannel(tb testing.TB, url string) (*amqp.Connection, *amqp.Channel) {
	tb.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	return conn, ch
}

// deleteQueues deletes the queues b declared and their dead letters, once the test is
// over: quorum queues cost the shared broker more than classic ones while they live.
func deleteQueues(t testing.TB, b *rabbitmq.Backend) {
	t.Cleanup(func() {
		var queues []string
		for _, name := range rabbitmq.DeclaredQueues(b) {
			queues = append(queues, name, rabbitmq.DeadQueue(name))
		}
		testbroker.DeleteQueues(t, brokerURL(t), queues...)
	})
}

// TestContractQuorum runs the contract suite on quorum queues. They have no priorities:
// the backend says so (Capabilities), and the suite skips the rules that need them.
func TestContractQuorum(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	backendtest.Run(t, backendtest.Options{
		New: func(t *testing.T) backend.Backend {
			b := open(t, rabbitmq.Config{QueueType: rabbitmq.Quorum})
			deleteQueues(t, b)
			return b
		},
		Parallel: true,
	})
}

func TestCapabilitiesFollowTheQueueType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		qt   rabbitmq.QueueType
		want backend.Capabilities
	}{{"", backend.CapPriority}, {rabbitmq.Classic, backend.CapPriority}, {rabbitmq.Quorum, 0}} {
		b := open(t, rabbitmq.Config{QueueType: tc.qt})
		if got := backend.CapabilitiesOf(b); got != tc.want {
			t.Errorf("queue type %q: capabilities %v, want %v", tc.qt, got, tc.want)
		}
		b.Close(context.Background())
	}
	_, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: brokerURL(t), QueueType: "stream"})
	if err == nil || !strings.Contains(err.Error(), `"stream"`) {
		t.Fatalf("Open with queue type stream: %v, want an error naming it", err)
	}
}

// TestQueueTypeMismatchIsAClearError declares a queue of one type, then the same name
// with the other: the second Declare fails, naming the queue and both types, and the
// backend goes on working.
func TestQueueTypeMismatchIsAClearError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ first, second rabbitmq.QueueType }{
		{rabbitmq.Classic, rabbitmq.Quorum},
		{rabbitmq.Quorum, rabbitmq.Classic},
	} {
		t.Run(fmt.Sprintf("%s-then-%s", tc.first, tc.second), func(t *testing.T) {
			first := open(t, rabbitmq.Config{QueueType: tc.first})
			defer first.Close(ctx)
			deleteQueues(t, first)
			q := uniqueQueue(t)
			if err := first.Declare(ctx, q); err != nil {
				t.Fatal(err)
			}
			second := open(t, rabbitmq.Config{QueueType: tc.second})
			defer second.Close(ctx)
			err := second.Declare(ctx, q)
			var te *backend.TransportError
			if err == nil || !errors.As(err, &te) {
				t.Fatalf("Declare as %s of a %s queue: %v, want a TransportError", tc.second, tc.first, err)
			}
			for _, want := range []string{fmt.Sprintf("%q", q.Name), "as a " + string(tc.first) + " queue", "declares " + string(tc.second) + " queues"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			// The refusal closed a channel, not the backend: it still publishes.
			if err := second.Publish(ctx, backend.NewEnvelope(q.Name, []byte("x")), 0); err != nil {
				t.Fatalf("Publish after the refused Declare: %v", err)
			}
		})
	}
}

// TestFailoverToTheNextURL gives the backend two routes to the broker: the first is
// cut while a stream consumes, and the backend goes on through the second by itself.
func TestFailoverToTheNextURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := brokerURL(t)
	first, second := testbroker.NewProxy(t, url), testbroker.NewProxy(t, url)
	b, err := rabbitmq.Open(ctx, rabbitmq.Config{URLs: []string{first.URL(url), second.URL(url)}, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	q := uniqueQueue(t)
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	s, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Drop()
	// A publish under way when the route is cut fails (a transport error): the caller
	// publishes again, as a client would, and the next attempt goes through the other
	// route once the backend has reconnected.
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			env := backend.NewEnvelope(q.Name, fmt.Appendf(nil, "job-%d", i))
			for attempt := 1; ; attempt++ {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := b.Publish(pctx, env, 0)
				cancel()
				if err == nil {
					break
				}
				var te *backend.TransportError
				if !errors.As(err, &te) || attempt == 20 {
					t.Fatalf("Publish %d (attempt %d): %v", i, attempt, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	publish(0, 50)
	collect(t, s, 50, 30*time.Second)
	first.Cut()
	publish(50, 100)
	// Jobs taken before the cut whose acks were lost come again (marked redelivered):
	// receive until every job published after the cut has come.
	missing := make(map[string]bool)
	for i := 50; i < 100; i++ {
		missing[fmt.Sprintf("job-%d", i)] = true
	}
	deadline := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case d, ok := <-s.Deliveries():
			if !ok {
				t.Fatalf("stream ended with %d jobs missing: %v", len(missing), s.Err())
			}
			env, err := d.Envelope()
			if err != nil {
				t.Fatal(err)
			}
			delete(missing, string(env.Payload))
			if err := d.Ack(ctx); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		case <-deadline:
			t.Fatalf("%d jobs published after the first route was cut never arrived", len(missing))
		}
	}
}
