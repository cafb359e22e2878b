package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// notYet checks, once every goroutine of the bubble is blocked, that nothing came on
// c: what a call returned too early fails the test with msg (a format for it).
func notYet(t *testing.T, c <-chan error, msg string) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-c:
		t.Fatalf(msg, err)
	default:
	}
}

// counting returns a handler that acks every job and counts it in n.
func counting(n *atomic.Int32) worker.Handler {
	return worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result {
		n.Add(1)
		return worker.Result{}
	})
}

// waitFor returns a handler that acks each job once release is closed.
func waitFor(release <-chan struct{}) worker.Handler {
	return worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result {
		<-release
		return worker.Result{}
	})
}

// nop acks every job; retryAll retries every job.
var (
	nop      = worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })
	retryAll = worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{Outcome: worker.Retry} })
)
