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
	"github.com/wasmjobs/wasmjobs/worker"
)

// mapDeliveries wraps a backend: each delivery of its streams reaches the worker as
// wrap makes it, to inject a fault into its settles.
type mapDeliveries struct {
	backend.Backend
	wrap func(backend.Delivery) backend.Delivery
}

func (m *mapDeliveries) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := m.Backend.Consume(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make(chan backend.Delivery)
	go func() {
		defer close(out)
		for d := range st.Deliveries() {
			out <- m.wrap(d)
		}
	}()
	return &wrappedStream{Stream: st, ch: out}, nil
}

// hangingSettles wraps a backend so that publishing settles (retry, defer, dead
// letter) wait until their context ends, as they do on a broker that went away.
func hangingSettles(b backend.Backend) backend.Backend {
	return &mapDeliveries{Backend: b, wrap: func(d backend.Delivery) backend.Delivery { return hangingDelivery{d} }}
}

type hangingDelivery struct{ backend.Delivery }

func (hangingDelivery) Retry(ctx context.Context, _ backend.Envelope, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// dropWaits wraps a backend so that a stream's Drop waits until the stream's context
// ends, as a RabbitMQ stream does while it waits for a lost connection.
func dropWaits(b backend.Backend) backend.Backend { return &dropWaiting{b} }

type dropWaiting struct{ backend.Backend }

func (d *dropWaiting) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
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

// deafSettles wraps a backend so that publishing settles ignore their context and wait
// until release is closed: a backend that breaks its promise.
func deafSettles(b backend.Backend, release chan struct{}) backend.Backend {
	return &mapDeliveries{Backend: b, wrap: func(d backend.Delivery) backend.Delivery { return deafDelivery{d, release} }}
}

type deafDelivery struct {
	backend.Delivery
	release chan struct{}
}

func (d deafDelivery) Retry(context.Context, backend.Envelope, time.Duration) error {
	<-d.release
	return errors.New("released")
}

// slowAcks makes every Ack of the backend it wraps take ackTime, and counts them.
type slowAcks struct {
	ackTime time.Duration
	acked   atomic.Int32
}

func (s *slowAcks) wrap(b backend.Backend) backend.Backend {
	return &mapDeliveries{Backend: b, wrap: func(d backend.Delivery) backend.Delivery { return &slowAck{Delivery: d, s: s} }}
}

type slowAck struct {
	backend.Delivery
	s *slowAcks
}

func (d *slowAck) Ack(ctx context.Context) error {
	time.Sleep(d.s.ackTime)
	err := d.Delivery.Ack(ctx)
	if err == nil {
		d.s.acked.Add(1)
	}
	return err
}

type wrappedStream struct {
	backend.Stream
	ch chan backend.Delivery
}

func (w *wrappedStream) Deliveries() <-chan backend.Delivery { return w.ch }

func TestStopWaitsForSlowJobAndItsAck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &slowAcks{ackTime: 2 * time.Second}
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(5 * time.Second)
			return worker.Result{}
		})
		r := newRigOn(t, b.wrap, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "")
		time.Sleep(time.Second)
		start := time.Now()
		if err := r.stop(time.Minute); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// The job had 4 s to run and its ack 2 s: Stop returns only after both.
		if took := time.Since(start); took != 6*time.Second || b.acked.Load() != 1 {
			t.Fatalf("Stop returned after %v with %d acks, want 6s and 1", took, b.acked.Load())
		}
		if st := r.stats("q"); st.Acked != 1 || st.Pending+st.Unacked != 0 {
			t.Fatalf("stats after Stop: %+v", st)
		}
	})
}

func TestDrainTimeoutLeavesUnfinishedUnacked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var finished atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if string(j.Envelope.Payload) == "quick" {
				time.Sleep(time.Second)
				finished.Add(1)
				return worker.Result{}
			}
			select {
			case <-time.After(time.Hour):
				return worker.Result{}
			case <-ctx.Done():
				return worker.Result{Outcome: worker.Failed, Reason: "cancelled"}
			}
		})
		r := newRig(t, worker.Config{Concurrency: 4}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "quick")
		for range 5 {
			r.publish("q", "slow")
		}
		time.Sleep(100 * time.Millisecond)
		err := r.stop(3 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "drain timeout: 3 jobs left unacknowledged") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v", err)
		}
		synctest.Wait() // the cancelled handlers return; their jobs are not settled
		st := r.stats("q")
		// The quick job finished and was acked; the three running slow ones and the two
		// never started are all back in the queue.
		if finished.Load() != 1 || st.Acked != 1 || st.Pending != 5 || st.Unacked != 0 || st.Dead != 0 || st.Delayed != 0 {
			t.Fatalf("after the drain timeout: stats %+v, finished %d", st, finished.Load())
		}
		if got := r.eventsOf(worker.EventAbandoned); got != 3 {
			t.Fatalf("%d abandoned events, want 3", got)
		}
		pending, _ := r.b.Pending("q")
		for _, env := range pending {
			if string(env.Payload) == "slow" && env.Attempt != 1 {
				t.Fatalf("an abandoned job lost an attempt: %+v", env)
			}
		}
	})
}

// TestStopEndsSettlesAtTheDrainDeadline: the drain timeout is a promise. A settle
// under way when it passes ends with it, not at its own, longer, SettleTimeout.
func TestStopEndsSettlesAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRigOn(t, hangingSettles, worker.Config{SettleTimeout: time.Hour}, worker.Queue{Name: "q", Handler: retryAll})
		r.publish("q", "")
		synctest.Wait() // the job runs and its settle waits
		start := time.Now()
		err := r.stop(5 * time.Second)
		if took := time.Since(start); took != 5*time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop: %v, want the drain timeout", err)
		}
		if st := r.stats("q"); st.Acked != 0 || st.Pending+st.Unacked != 1 {
			t.Fatalf("stats %+v: the job must stay for the backend to deliver again", st)
		}
	})
}

// TestStopEndsStreamsBeforeDroppingThem: Stop cancels a stream's context before it
// drops the stream, so that a stream stuck on a lost connection cannot hold Stop.
func TestStopEndsStreamsBeforeDroppingThem(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRigOn(t, dropWaits, worker.Config{}, worker.Queue{Name: "q", Handler: nop})
		stopped := make(chan error, 1)
		go func() { stopped <- r.w.Stop(context.Background()) }()
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

// TestStopIsBoundedWhenASettleIgnoresItsContext: even a backend whose settle ignores
// its context cannot hold Stop past the drain deadline plus its grace; Stop says so.
func TestStopIsBoundedWhenASettleIgnoresItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release) // before the bubble ends, the stuck settle returns
		wrap := func(b backend.Backend) backend.Backend { return deafSettles(b, release) }
		r := newRigOn(t, wrap, worker.Config{SettleTimeout: time.Hour}, worker.Queue{Name: "q", Handler: retryAll})
		r.publish("q", "")
		synctest.Wait() // the job runs and its settle hangs
		start := time.Now()
		err := r.stop(5 * time.Second)
		if took := time.Since(start); took > 5*time.Second+time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout plus its 1s grace at most", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 settles still under way") {
			t.Fatalf("stop: %v, want the drain timeout and the stuck settle named", err)
		}
	})
}
