package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

// gatedConsume wraps a backend: a Consume of a gated queue announces itself on entered
// and waits for its gate, which hands it the error to fail with (nil: consume).
type gatedConsume struct {
	backend.Backend
	gates   map[string]chan error // set before use, read only after
	entered chan string
}

func (g *gatedConsume) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	if gate, ok := g.gates[q.Name]; ok {
		g.entered <- q.Name
		select {
		case err := <-gate:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Backend.Consume(ctx, q)
}

var nop = worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })

// TestRegisterDuringAFailedStartFails: a queue registered while Start is subscribing
// is only served if Start succeeds: when Start fails, that Register fails too, and the
// queue is not registered.
func TestRegisterDuringAFailedStartFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		g := &gatedConsume{Backend: mb, gates: map[string]chan error{"a": make(chan error)}, entered: make(chan string)}
		w := worker.New(g, worker.Config{})
		defer w.Stop(ctx)
		if err := w.Register(ctx, worker.Queue{Name: "a", Handler: nop}); err != nil {
			t.Fatal(err)
		}
		started := make(chan error, 1)
		go func() { started <- w.Start(ctx) }()
		<-g.entered // Start is subscribing a
		registered := make(chan error, 1)
		go func() { registered <- w.Register(ctx, worker.Queue{Name: "b", Handler: nop}) }()
		synctest.Wait()
		select {
		case err := <-registered:
			t.Fatalf("Register during Start returned %v before Start's outcome", err)
		default:
		}
		g.gates["a"] <- errors.New("broker unreachable")
		if err := <-started; err == nil {
			t.Fatal("Start succeeded")
		}
		if err := <-registered; err == nil {
			t.Fatal("Register during a Start that failed returned nil: its queue is not served")
		}
		if r := w.Running(); len(r) != 1 {
			t.Fatalf("queues %v, want only a (registered before Start)", r)
		}
	})
}

// TestOverlappingRegistersOfANewQueue: a second Register of a new queue made while the
// first one subscribes shares its outcome: both fail when the subscription fails, and
// both succeed when it succeeds.
func TestOverlappingRegistersOfANewQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
	}{{"fails", errors.New("broker unreachable")}, {"succeeds", nil}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				mb := memory.New(memory.Config{})
				defer mb.Close(ctx)
				g := &gatedConsume{Backend: mb, gates: map[string]chan error{"c": make(chan error)}, entered: make(chan string)}
				w := worker.New(g, worker.Config{})
				defer w.Stop(ctx)
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				first, second := make(chan error, 1), make(chan error, 1)
				go func() { first <- w.Register(ctx, worker.Queue{Name: "c", Handler: nop}) }()
				<-g.entered
				go func() { second <- w.Register(ctx, worker.Queue{Name: "c", Handler: nop}) }()
				synctest.Wait()
				select {
				case err := <-second:
					t.Fatalf("the second Register returned %v before the first knew", err)
				default:
				}
				g.gates["c"] <- c.err
				err1, err2 := <-first, <-second
				if (err1 == nil) != (c.err == nil) || (err2 == nil) != (c.err == nil) {
					t.Fatalf("Registers returned %v and %v, want both to report %v", err1, err2, c.err)
				}
				if _, ok := w.Running()["c"]; ok != (c.err == nil) {
					t.Fatalf("queues %v after the Registers returned %v", w.Running(), c.err)
				}
			})
		})
	}
}

// countedConsume wraps a backend: it counts Consume calls and the calls under way, and
// while armed every Consume waits for its context, as during a broker outage.
type countedConsume struct {
	stuckConsume
	calls, inCall atomic.Int32
}

func (c *countedConsume) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	c.calls.Add(1)
	c.inCall.Add(1)
	defer c.inCall.Add(-1)
	return c.stuckConsume.Consume(ctx, q)
}

// TestUnregisterEndsAResubscription: a queue unregistered while its stream is being
// subscribed again (an outage) is not consumed again: Unregister ends the call under
// way, and no later attempt is made, even once the backend is back.
func TestUnregisterEndsAResubscription(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		c := &countedConsume{stuckConsume: stuckConsume{Backend: mb, consumes: make(chan string, 100), lose: make(chan struct{})}}
		w := worker.New(c, worker.Config{Jitter: noJitter})
		defer w.Stop(ctx)
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: nop}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		c.armed.Store(true)
		close(c.lose) // the stream ends; the worker subscribes again and waits
		<-c.consumes
		if err := w.Unregister(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := c.inCall.Load(); n != 0 {
			t.Fatalf("%d Consume calls still wait after Unregister", n)
		}
		calls := c.calls.Load()
		c.armed.Store(false) // the backend is back
		time.Sleep(time.Hour)
		if n := c.calls.Load(); n != calls {
			t.Fatalf("the removed queue was consumed again: %d calls after Unregister", n-calls)
		}
		if r := w.Running(); len(r) != 0 {
			t.Fatalf("queues %v after Unregister", r)
		}
	})
}
