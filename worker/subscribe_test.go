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
	es := &wrappedStream{Stream: st, ch: make(chan backend.Delivery), err: &backend.TransportError{Op: "consume", Err: errors.New("connection reset")}}
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

// flaky wraps a backend so that its first stream ends with a transport error after
// one delivery.
type flaky struct {
	backend.Backend
	consumed atomic.Int32
}

// wrappedStream is a stream whose deliveries come from ch, and whose Err is err once
// set (a stream the fake ends with a fault), the wrapped stream's otherwise.
type wrappedStream struct {
	backend.Stream
	ch  chan backend.Delivery
	err error
}

func (s *wrappedStream) Deliveries() <-chan backend.Delivery { return s.ch }

func (s *wrappedStream) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.Stream.Err()
}

func (f *flaky) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := f.Backend.Consume(ctx, q)
	if err != nil || f.consumed.Add(1) > 1 {
		return st, err
	}
	es := &wrappedStream{Stream: st, ch: make(chan backend.Delivery), err: &backend.TransportError{Op: "consume", Err: errors.New("connection reset")}}
	go func() {
		defer close(es.ch)
		es.ch <- <-st.Deliveries()
		st.Drop()
	}()
	return es, nil
}

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
			b := &stuckConsume{consumes: make(chan string, 1), lose: make(chan struct{})}
			settled := make(chan worker.Event, 1)
			running, finish := make(chan struct{}), make(chan struct{})
			h := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result {
				close(running)
				<-finish
				return worker.Result{}
			})
			r := newRigOn(t, wrapping(b, &b.Backend), worker.Config{Jitter: noJitter, Observer: worker.ObserverFunc(func(e worker.Event) {
				if e.Kind == worker.EventSettled || e.Kind == worker.EventSettleFailed {
					settled <- e
				}
			})}, worker.Queue{Name: "q", Handler: h})
			defer func() {
				if err := r.stop(10 * time.Second); err != nil {
					t.Errorf("stop: %v", err)
				}
			}()
			r.publish("q", "")
			<-running
			b.armed.Store(true)
			c.block(t, r.w, b)
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
				if e.Settle != worker.Ack {
					t.Fatalf("settle %v %v: %v", e.Kind, e.Settle, e.Err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the running job did not settle while a Consume waited: a lock is held across it")
			}
		})
	}
}

func TestUnregisterWaitsAndKeepsQueuedJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(2 * time.Second)
			ran.Add(1)
			return worker.Result{}
		})
		r := newRig(t, worker.Config{Concurrency: 2}, worker.Queue{Name: "q", Handler: h})
		for range 6 {
			r.publish("q", "x")
		}
		time.Sleep(time.Second)
		start := time.Now()
		if err := r.w.Unregister(context.Background(), "q"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != time.Second || ran.Load() != 2 {
			t.Fatalf("Unregister returned after %v with %d jobs done, want 1s and 2", took, ran.Load())
		}
		time.Sleep(time.Minute)
		if st := r.stats("q"); st.Pending != 4 || st.Acked != 2 || ran.Load() != 2 {
			t.Fatalf("after Unregister: stats %+v, ran %d", st, ran.Load())
		}
		// Registering again resumes the queue.
		if err := r.w.Register(context.Background(), worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if st := r.stats("q"); st.Acked != 6 {
			t.Fatalf("after registering again: %+v", st)
		}
	})
}

func TestUnregisterTimeoutReturnsJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: waitFor(release)})
		r.publish("q", "x")
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.w.Unregister(ctx, "q"); err == nil || !strings.Contains(err.Error(), "1 jobs still running") {
			t.Fatalf("Unregister = %v", err)
		}
		close(release)
		synctest.Wait()
		// The job's ack failed (its stream was dropped): it is back in the queue, not lost.
		if st := r.stats("q"); st.Pending != 1 || st.Acked != 0 {
			t.Fatalf("stats %+v", st)
		}
		if r.eventsOf(worker.EventSettleFailed) != 1 {
			t.Fatal("the failed ack was not reported")
		}
	})
}

func TestRegisterAgainSwapsHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mk := func(v string) worker.Handler {
			return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
				time.Sleep(time.Second)
				return worker.Result{Version: v}
			})
		}
		r := newRig(t, worker.Config{Concurrency: 1}, worker.Queue{Name: "q", Handler: mk("v1")})
		for range 4 {
			r.publish("q", "x")
		}
		time.Sleep(1500 * time.Millisecond)
		if err := r.w.Register(context.Background(), worker.Queue{Name: "q", Handler: mk("v2")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		var versions []string
		for _, e := range r.settled() {
			versions = append(versions, e.Result.Version)
		}
		if got := strings.Join(versions, ","); got != "v1,v1,v2,v2" {
			t.Fatalf("versions %s: a running job keeps its handler, new ones get the new one", got)
		}
	})
}

func TestStreamLostIsResubscribed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{}
		var ran atomic.Int32
		h := counting(&ran)
		r := newRigOn(t, wrapping(f, &f.Backend), worker.Config{}, worker.Queue{Name: "q", Handler: h})
		for range 5 {
			r.publish("q", "")
		}
		time.Sleep(time.Minute)
		st := r.stats("q")
		if f.consumed.Load() != 2 || st.Acked+st.Pending != 5 || ran.Load() < 5 {
			t.Fatalf("consumed %d times, ran %d, stats %+v", f.consumed.Load(), ran.Load(), st)
		}
		if err := r.stop(time.Minute); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBackendClosedStopsConsuming(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			return worker.Result{}
		})})
		r.b.Close(context.Background())
		synctest.Wait()
		if err := r.stop(time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRegisterDuringAFailedStartFails: a queue registered while Start is subscribing
// is only served if Start succeeds: when Start fails, that Register fails too, and the
// queue is not registered.
func TestRegisterDuringAFailedStartFails(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		g := &gatedConsume{gates: map[string]chan error{"a": make(chan error)}, entered: make(chan string)}
		w := newIdleRig(t, wrapping(g, &g.Backend), worker.Config{}).w
		if err := w.Register(ctx, worker.Queue{Name: "a", Handler: nop}); err != nil {
			t.Fatal(err)
		}
		started := make(chan error, 1)
		go func() { started <- w.Start(ctx) }()
		<-g.entered // Start is subscribing a
		registered := make(chan error, 1)
		go func() { registered <- w.Register(ctx, worker.Queue{Name: "b", Handler: nop}) }()
		notYet(t, registered, "Register during Start returned %v before Start's outcome")
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
				g := &gatedConsume{gates: map[string]chan error{"c": make(chan error)}, entered: make(chan string)}
				w := newRigOn(t, wrapping(g, &g.Backend), worker.Config{}).w
				first, second := make(chan error, 1), make(chan error, 1)
				go func() { first <- w.Register(ctx, worker.Queue{Name: "c", Handler: nop}) }()
				<-g.entered
				go func() { second <- w.Register(ctx, worker.Queue{Name: "c", Handler: nop}) }()
				notYet(t, second, "the second Register returned %v before the first knew")
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

// TestUnregisterEndsAResubscription: a queue unregistered while its stream is being
// subscribed again (an outage) is not consumed again: Unregister ends the call under
// way, and no later attempt is made, even once the backend is back.
func TestUnregisterEndsAResubscription(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := &countedConsume{stuckConsume: stuckConsume{consumes: make(chan string, 100), lose: make(chan struct{})}}
		w := newRigOn(t, wrapping(c, &c.Backend), worker.Config{Jitter: noJitter}, worker.Queue{Name: "q", Handler: nop}).w
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

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, worker.Config{})
		ctx := context.Background()
		if err := r.w.Register(ctx, worker.Queue{Name: "q"}); err == nil || !strings.Contains(err.Error(), "nil handler") {
			t.Errorf("nil handler: %v", err)
		}
		if err := r.w.Register(ctx, worker.Queue{Name: "bad name", Handler: worker.HandlerFunc(nil)}); err == nil {
			t.Error("bad queue name accepted")
		}
		if err := r.w.Unregister(ctx, "nope"); err == nil {
			t.Error("unregistering an unknown queue succeeded")
		}
		if err := r.w.Start(ctx); err == nil {
			t.Error("second Start succeeded")
		}
		if err := r.stop(time.Second); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Register(ctx, worker.Queue{Name: "q", Handler: worker.HandlerFunc(nil)}); !errors.Is(err, worker.ErrStopped) {
			t.Errorf("Register after Stop: %v", err)
		}
		if err := r.w.Stop(ctx); err == nil {
			t.Error("second Stop succeeded")
		}
	})
}

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
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, worker.ErrLeftBehind) || !strings.Contains(err.Error(), "1 settles still under way") {
			t.Fatalf("stop: %v, want the drain timeout and the stuck settle named, left behind (worker.ErrLeftBehind)", err)
		}
	})
}

// TestStopTakingTakesNoNewJob: from StopTaking on (the drain's first step), no job
// starts, even where a slot frees and deliveries wait: the running job finishes and
// the others stay queued for Stop to leave.
func TestStopTakingTakesNoNewJob(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			ran.Add(1)
			time.Sleep(time.Second)
			return worker.Result{}
		})
		r := newRig(t, worker.Config{Concurrency: 1}, worker.Queue{Name: "q", Handler: h})
		for range 10 {
			r.publish("q", "")
		}
		time.Sleep(100 * time.Millisecond)
		r.w.StopTaking()
		r.w.StopTaking() // twice is harmless
		time.Sleep(5 * time.Second)
		if st := r.stats("q"); ran.Load() != 1 || st.Acked != 1 || st.Pending != 9 {
			t.Fatalf("%d jobs ran after StopTaking, stats %+v; want the one running acked and 9 queued", ran.Load(), st)
		}
		if err := r.stop(time.Minute); err != nil {
			t.Fatalf("Stop after StopTaking: %v", err)
		}
	})
}
