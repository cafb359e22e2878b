package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

// stuckConsume wraps a backend: while armed, Consume waits until its context ends, as
// a RabbitMQ Consume does while the broker is unreachable; the first stream it hands
// out ends (a lost connection) when lose is closed.
type stuckConsume struct {
	backend.Backend
	armed    atomic.Bool
	consumes chan string // each Consume that got stuck, by queue
	lose     chan struct{}
	first    atomic.Bool
}

func (s *stuckConsume) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	if s.armed.Load() {
		s.consumes <- q.Name
		<-ctx.Done()
		return nil, &backend.TransportError{Op: "wait for the connection", Err: ctx.Err()}
	}
	st, err := s.Backend.Consume(ctx, q)
	if err != nil || s.first.Swap(true) {
		return st, err
	}
	es := &endingStream{Stream: st, ch: make(chan backend.Delivery), err: &backend.TransportError{Op: "consume", Err: errors.New("connection reset")}}
	go func() {
		defer close(es.ch)
		for {
			select {
			case d, ok := <-st.Deliveries():
				if !ok {
					return
				}
				es.ch <- d
			case <-s.lose:
				return // the delivered jobs stay settleable, as on a memory backend
			}
		}
	}()
	return es, nil
}

// TestSettleGoesOnWhileConsumeWaits: a Consume that waits on the network (a hot
// reload registering a queue, or a resubscription during an outage) must not stall the
// settle of a job that is running: no lock is held across the call.
func TestSettleGoesOnWhileConsumeWaits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		block func(t *testing.T, w *worker.Worker, b *stuckConsume)
	}{
		{"register a queue", func(t *testing.T, w *worker.Worker, b *stuckConsume) {
			go w.Register(context.Background(), worker.Queue{Name: "other", Handler: worker.HandlerFunc(
				func(context.Context, *worker.Job) worker.Result { return worker.Result{} })})
		}},
		{"resubscribe", func(t *testing.T, w *worker.Worker, b *stuckConsume) {
			close(b.lose)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mb := memory.New(memory.Config{})
			defer mb.Close(ctx)
			b := &stuckConsume{Backend: mb, consumes: make(chan string, 1), lose: make(chan struct{})}
			settled := make(chan worker.Event, 1)
			w := worker.New(b, worker.Config{Jitter: noJitter, Observer: worker.ObserverFunc(func(e worker.Event) {
				if e.Kind == worker.EventSettled || e.Kind == worker.EventSettleFailed {
					settled <- e
				}
			})})
			running, finish := make(chan struct{}), make(chan struct{})
			h := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result {
				close(running)
				<-finish
				return worker.Result{}
			})
			if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
				t.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := w.Stop(stopCtx); err != nil {
					t.Errorf("stop: %v", err)
				}
			}()
			if err := mb.Publish(ctx, backend.NewEnvelope("q", nil), 0); err != nil {
				t.Fatal(err)
			}
			<-running
			b.armed.Store(true)
			c.block(t, w, b)
			select {
			case <-b.consumes: // a Consume is now stuck
			case <-time.After(20 * time.Second):
				t.Fatal("no Consume was called")
			}
			close(finish)
			select {
			case e := <-settled:
				// On a lost stream the ack may fail (the job goes back): what matters is
				// that the settle ran.
				if e.Settle != worker.SettleAck {
					t.Fatalf("settle %v %v: %v", e.Kind, e.Settle, e.Err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the running job did not settle while a Consume waited: a lock is held across it")
			}
		})
	}
}

// hangingSettles wraps a backend so that publishing settles (retry, defer, dead
// letter) wait until their context ends, as they do on a broker that went away.
type hangingSettles struct{ backend.Backend }

func (h *hangingSettles) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := h.Backend.Consume(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make(chan backend.Delivery)
	go func() {
		defer close(out)
		for d := range st.Deliveries() {
			out <- hangingDelivery{d}
		}
	}()
	return &wrappedStream{Stream: st, ch: out}, nil
}

type hangingDelivery struct{ backend.Delivery }

func (hangingDelivery) Retry(ctx context.Context, _ backend.Envelope, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestStopEndsSettlesAtTheDrainDeadline: the drain timeout is a promise. A settle
// under way when it passes ends with it, not at its own, longer, SettleTimeout.
func TestStopEndsSettlesAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		w := worker.New(&hangingSettles{mb}, worker.Config{SettleTimeout: time.Hour})
		h := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{Outcome: worker.Retry} })
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mb.Publish(ctx, backend.NewEnvelope("q", nil), 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the job runs and its settle waits
		start := time.Now()
		drain, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := w.Stop(drain)
		if took := time.Since(start); took != 5*time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop: %v, want the drain timeout", err)
		}
		st, _ := mb.Stats("q")
		if st.Acked != 0 || st.Pending+st.Unacked != 1 {
			t.Fatalf("stats %+v: the job must stay for the backend to deliver again", st)
		}
	})
}

// dropWaits wraps a backend so that a stream's Drop waits until the stream's context
// ends, as a RabbitMQ stream does while it waits for a lost connection.
type dropWaits struct{ backend.Backend }

func (d *dropWaits) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := d.Backend.Consume(ctx, q)
	if err != nil {
		return nil, err
	}
	return &waitingDrop{Stream: st, ctx: ctx}, nil
}

type waitingDrop struct {
	backend.Stream
	ctx context.Context
}

func (s *waitingDrop) Drop() {
	<-s.ctx.Done()
	s.Stream.Drop()
}

// TestStopEndsStreamsBeforeDroppingThem: Stop cancels a stream's context before it
// drops the stream, so that a stream stuck on a lost connection cannot hold Stop.
func TestStopEndsStreamsBeforeDroppingThem(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		w := worker.New(&dropWaits{mb}, worker.Config{})
		h := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- w.Stop(ctx) }()
		synctest.Wait()
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Stop waits on a stream it dropped before ending its context")
			// (the bubble then reports the stuck goroutines)
		}
	})
}

// deafSettles wraps a backend so that publishing settles ignore their context and wait
// until release is closed: a backend that breaks its promise.
type deafSettles struct {
	backend.Backend
	release chan struct{}
}

func (h *deafSettles) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := h.Backend.Consume(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make(chan backend.Delivery)
	go func() {
		defer close(out)
		for d := range st.Deliveries() {
			out <- deafDelivery{d, h.release}
		}
	}()
	return &wrappedStream{Stream: st, ch: out}, nil
}

type deafDelivery struct {
	backend.Delivery
	release chan struct{}
}

func (d deafDelivery) Retry(context.Context, backend.Envelope, time.Duration) error {
	<-d.release
	return errors.New("released")
}

// TestStopIsBoundedWhenASettleIgnoresItsContext: even a backend whose settle ignores
// its context cannot hold Stop past the drain deadline plus its grace; Stop says so.
func TestStopIsBoundedWhenASettleIgnoresItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		b := &deafSettles{Backend: mb, release: make(chan struct{})}
		defer close(b.release) // before the bubble ends, the stuck settle returns
		w := worker.New(b, worker.Config{SettleTimeout: time.Hour})
		h := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{Outcome: worker.Retry} })
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mb.Publish(ctx, backend.NewEnvelope("q", nil), 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the job runs and its settle hangs
		start := time.Now()
		drain, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := w.Stop(drain)
		if took := time.Since(start); took > 5*time.Second+time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout plus its 1s grace at most", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 settles still under way") {
			t.Fatalf("stop: %v, want the drain timeout and the stuck settle named", err)
		}
	})
}
