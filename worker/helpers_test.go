package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a worker on a memory backend, inside a synctest bubble.
type rig struct {
	t      *testing.T
	b      *memory.Backend
	w      *worker.Worker
	mu     sync.Mutex
	events []worker.Event

	stopOnce sync.Once
	stopErr  error
}

// noJitter makes backoff deterministic: the wait is the ceiling.
func noJitter(ceiling time.Duration) time.Duration { return ceiling }

// newRig returns a started worker on a memory backend, with queues registered. Its
// events are recorded (cfg.Observer sees them too), its backoff has no jitter unless
// cfg says otherwise, and it stops, then its backend closes, with the test.
func newRig(t *testing.T, cfg worker.Config, queues ...worker.Queue) *rig {
	return newRigOn(t, nil, cfg, queues...)
}

// newRigOn is newRig with the worker on wrap(the memory backend): a backend that
// injects a fault. Nil wrap is the memory backend itself.
func newRigOn(t *testing.T, wrap func(backend.Backend) backend.Backend, cfg worker.Config, queues ...worker.Queue) *rig {
	t.Helper()
	r := newIdleRig(t, wrap, cfg)
	for _, q := range queues {
		r.register(q)
	}
	if err := r.w.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
}

// newIdleRig is newRigOn before any Register or Start: for the tests of what those do.
func newIdleRig(t *testing.T, wrap func(backend.Backend) backend.Backend, cfg worker.Config) *rig {
	t.Helper()
	r := &rig{t: t, b: memory.New(memory.Config{})}
	if cfg.Jitter == nil {
		cfg.Jitter = noJitter
	}
	obs := cfg.Observer
	cfg.Observer = worker.ObserverFunc(func(e worker.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		if obs != nil {
			obs.Observe(e)
		}
	})
	var b backend.Backend = r.b
	if wrap != nil {
		b = wrap(r.b)
	}
	r.w = worker.New(b, cfg)
	t.Cleanup(func() {
		r.stop(time.Minute)
		r.b.Close(context.Background())
	})
	return r
}

// wrapping returns the wrap (of newRigOn) that puts the fault-injecting backend w
// over the rig's: w embeds it, as *inner.
func wrapping(w backend.Backend, inner *backend.Backend) func(backend.Backend) backend.Backend {
	return func(b backend.Backend) backend.Backend {
		*inner = b
		return w
	}
}

// register registers q, failing the test if it cannot.
func (r *rig) register(q worker.Queue) {
	r.t.Helper()
	if err := r.w.Register(context.Background(), q); err != nil {
		r.t.Fatalf("Register(%s): %v", q.Name, err)
	}
}

// stop stops the worker once, with a drain timeout.
func (r *rig) stop(timeout time.Duration) error {
	r.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		r.stopErr = r.w.Stop(ctx)
	})
	return r.stopErr
}

func (r *rig) publish(queue, payload string, mutate ...func(*backend.Envelope)) backend.Envelope {
	r.t.Helper()
	env := backend.NewEnvelope(queue, []byte(payload))
	for _, m := range mutate {
		m(&env)
	}
	if err := r.b.Publish(context.Background(), env, 0); err != nil {
		r.t.Fatalf("Publish: %v", err)
	}
	return env
}

func (r *rig) stats(queue string) memory.QueueStats {
	r.t.Helper()
	st, err := r.b.Stats(queue)
	if err != nil {
		r.t.Fatalf("Stats(%s): %v", queue, err)
	}
	return st
}

func (r *rig) dead(queue string) []backend.DeadLetter {
	r.t.Helper()
	dl, err := r.b.DeadLetters(context.Background(), queue, 0)
	if err != nil {
		r.t.Fatalf("DeadLetters(%s): %v", queue, err)
	}
	return dl
}

// settled returns the settled events so far.
func (r *rig) settled() []worker.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []worker.Event
	for _, e := range r.events {
		if e.Kind == worker.EventSettled {
			out = append(out, e)
		}
	}
	return out
}

func (r *rig) eventsOf(kind worker.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// runLog records each execution of a handler: the job and when it started.
type runLog struct {
	mu   sync.Mutex
	runs []run
}

type run struct {
	env     backend.Envelope
	attempt int
	at      time.Time
}

func (l *runLog) add(j *worker.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, run{env: j.Envelope.Clone(), attempt: j.Attempt, at: time.Now()})
}

func (l *runLog) all() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// handler returns a handler that records each run in l, then runs f.
func (l *runLog) handler(f func(ctx context.Context, j *worker.Job) worker.Result) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		l.add(j)
		return f(ctx, j)
	})
}

// script returns a handler that records each run in l and gives the n-th run (of
// every job) results[n-1]; an ack once they run out.
func (l *runLog) script(results ...worker.Result) worker.Handler {
	return l.handler(func(context.Context, *worker.Job) worker.Result {
		if n := len(l.all()); n <= len(results) {
			return results[n-1]
		}
		return worker.Result{}
	})
}

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

// flaky wraps a backend so that its first stream ends with a transport error after
// one delivery.
type flaky struct {
	backend.Backend
	consumed atomic.Int32
}

type endingStream struct {
	backend.Stream
	ch  chan backend.Delivery
	err error
}

func (s *endingStream) Deliveries() <-chan backend.Delivery { return s.ch }
func (s *endingStream) Err() error                          { return s.err }

func (f *flaky) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := f.Backend.Consume(ctx, q)
	if err != nil || f.consumed.Add(1) > 1 {
		return st, err
	}
	es := &endingStream{Stream: st, ch: make(chan backend.Delivery), err: &backend.TransportError{Op: "consume", Err: errors.New("connection reset")}}
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

// nop acks every job; retryAll retries every job.
var (
	nop      = worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })
	retryAll = worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{Outcome: worker.Retry} })
)

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
