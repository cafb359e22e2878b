// Package worker owns the pipeline that turns queued jobs into settled ones:
//
//	capacity -> dequeue -> decode -> extract -> execute -> acknowledge
//
// A Worker consumes queues of a backend.Backend and runs each job with its queue's
// Handler. It takes a delivery only when it has a free slot (the global Concurrency and
// the queue's own limit) and the queue's handler is ready, so that no job is claimed
// without the capacity to run it. The handler's Result settles the job: ack (after its
// child jobs are published), retry with backoff, defer to the front of the queue, or
// dead-letter. Stop drains: it waits for running jobs and their settles, up to the
// caller's deadline, and leaves what did not finish unacknowledged for the backend to
// deliver again.
//
// The worker knows nothing of WebAssembly: the Wasm host is one Handler, a Go function
// another.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
	"github.com/wasmjobs/wasmjobs/internal/inflight"
	"github.com/wasmjobs/wasmjobs/internal/telemetry"
)

// Defaults of Config and Queue.
const (
	DefaultConcurrency    = 16
	DefaultMaxAttempts    = 25
	DefaultBackoffBase    = time.Second
	DefaultBackoffCap     = time.Hour
	DefaultMaxDefers      = 100
	DefaultPriorityLevels = 2
	DefaultSettleTimeout  = 30 * time.Second
	DefaultReadyPoll      = 50 * time.Millisecond
)

// MaxRounds is how many times one job may wait for children (Wait): a wait past it is
// dead-lettered, so that a handler that waits every run cannot run for ever (a wait
// spends no attempt).
const MaxRounds = 1000

// Backoff is exponential backoff with full jitter: before attempt n+1 the job waits a
// random time between 0 and min(Cap, Base * 2^(n-1)).
type Backoff struct {
	// Base is the ceiling of the first wait. Zero means DefaultBackoffBase.
	Base time.Duration
	// Cap bounds every wait. Zero means DefaultBackoffCap.
	Cap time.Duration
}

// Config configures a Worker. The zero value is usable.
type Config struct {
	// Concurrency bounds the jobs running at once over all queues. Zero means
	// DefaultConcurrency; a negative value counts as 1.
	Concurrency int
	// MaxAttempts is the default of Queue.MaxAttempts. Zero means DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the default of Queue.Backoff.
	Backoff Backoff
	// MaxDefers is the default of Queue.MaxDefers. Zero means DefaultMaxDefers.
	MaxDefers int
	// SettleTimeout bounds each settle call. Zero means DefaultSettleTimeout. A drain
	// deadline cuts it short: Stop ends every settle under way when its context ends.
	SettleTimeout time.Duration
	// ReadyPoll is how often a handler that is not ready is asked again. Zero means
	// DefaultReadyPoll.
	ReadyPoll time.Duration
	// Jitter picks the actual wait given the backoff's ceiling. Nil picks uniformly in
	// [0, ceiling] (full jitter); tests pass a deterministic function.
	Jitter func(ceiling time.Duration) time.Duration
	// Observer receives every job's events. Nil means none.
	Observer Observer
	// Logger receives the worker's own warnings and errors. Nil discards them.
	Logger *slog.Logger
	// TracerProvider, when set, traces every run: a process span (a new root linking
	// to the job's enqueue, see Queue.TraceChild), with a settle span and a send span
	// for each child job inside it. Nil traces nothing and makes no span.
	TracerProvider trace.TracerProvider
}

// Queue is a queue a worker consumes, with its handler and policies.
type Queue struct {
	// Name is the queue's name; it is declared on the backend when registered.
	Name string
	// Handler runs the queue's jobs.
	Handler Handler
	// Middleware wraps Handler, the first outermost. Recover is always applied
	// outside them.
	Middleware []Middleware
	// Concurrency bounds this queue's running jobs. Zero means only the worker's
	// Concurrency bounds them.
	Concurrency int
	// KeyConcurrency bounds the running jobs of one concurrency key
	// (backend.Envelope.Key), in enqueue order, over every worker of the backend
	// (backend.QueueConfig.KeyConcurrency): a job of a key waits in the backend, taking
	// no slot here, while that many of its key are ahead of it. Zero means no bound.
	KeyConcurrency int
	// Prefetch is the backend stream's prefetch. Zero means the queue's concurrency
	// limit (or the worker's), so that nothing waits claimed behind a full worker.
	// With a Rate it is at most Burst, so that nothing waits claimed for the rate.
	Prefetch int
	// PriorityLevels is the queue's priority levels (backend.QueueConfig). The highest
	// level is reserved for deferred jobs, so jobs may use 0..PriorityLevels-1. Zero
	// means DefaultPriorityLevels; a negative value makes a plain FIFO queue, whose
	// deferred jobs return behind the backlog.
	PriorityLevels int
	// MaxAttempts is how many executions a job of this queue may have when its
	// envelope does not say. Zero means the worker's.
	MaxAttempts int
	// Backoff is this queue's retry backoff; zero fields mean the worker's.
	Backoff Backoff
	// MaxDefers bounds consecutive defers of one job; past it the job is
	// dead-lettered. Zero means the worker's.
	MaxDefers int
	// Timeout bounds each job (the Deadline middleware). Zero means no deadline.
	Timeout time.Duration
	// Rate bounds how fast this worker takes jobs of the queue, in jobs per second.
	// Zero (or rate.Inf) means no bound. The bound is this worker's: N workers on one
	// queue take up to N times Rate between them.
	Rate rate.Limit
	// Burst is the size of the token bucket: after an idle spell up to Burst jobs may
	// be taken at once, and then one each 1/Rate. Zero means 1 (jobs evenly spaced).
	// Ignored without Rate.
	Burst int
	// TraceChild makes a job's process span a child of its enqueue's span rather than
	// the root of a trace of its own that links to it: for queues whose jobs run at
	// once, where one trace from request to run reads best. Ignored without
	// Config.TracerProvider.
	TraceChild bool
}

// Worker runs the jobs of its registered queues. Create it with New, register queues,
// Start it, and Stop it to drain.
type Worker struct {
	tracer trace.Tracer // nil: tracing off
	b      backend.Backend
	cfg    Config
	log    *slog.Logger
	obs    Observer

	slots chan struct{} // global capacity: a token per running job
	wake  chan struct{} // buffered 1: queues or their capacity changed

	mu        sync.Mutex
	queues    map[string]*queueState
	starting  bool // Start is subscribing
	started   bool
	stopping  bool
	abandoned bool

	stop          chan struct{} // closed by StopTaking: take no more deliveries
	stopTaking    sync.Once
	stopCtx       context.Context // done when stop is closed: ends resubscriptions
	cancelStop    context.CancelFunc
	dispatchDone  chan struct{} // closed when the dispatcher returns
	streamCtx     context.Context
	cancelStreams context.CancelFunc
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	settleCtx     context.Context // done at the drain deadline: settles end with it
	cancelSettles context.CancelFunc

	tasks    chan task        // to the runners: one per slot, so a send never waits long
	jobs     inflight.Counter // jobs from delivery to the end of their settle
	settling inflight.Counter // settle calls under way
	runs     runs             // jobs running or settling, for Cancel
	resubs   sync.WaitGroup
}

// queueState is a registered queue.
type queueState struct {
	qc      backend.QueueConfig
	policy  atomic.Pointer[policy] // replaced when the queue is registered again
	running atomic.Int32
	stream  backend.Stream     // guarded by Worker.mu; nil while (re)subscribing
	cancel  context.CancelFunc // ends stream's context; guarded by Worker.mu
	removed bool               // guarded by Worker.mu
	// life ends when the queue is unregistered (or its registration fails) or the
	// worker stops: a subscription under way, or waiting to try again, gives up with it.
	// It is not the stream's context: Unregister keeps the stream while jobs settle.
	life      context.Context
	endLife   context.CancelFunc
	sub       *subscription // guarded by Worker.mu: the outcome of the first subscription
	drained   chan struct{} // closed when a removed queue's last job ends
	drainOnce sync.Once
	// limiter paces the queue's takes when its policy has a Rate. It is the
	// dispatcher's alone (made and used under Worker.mu in collect, and in take), and
	// outlives a new registration, which only sets its rate and burst.
	limiter *rate.Limiter
}

// policy is what a job of a queue runs with; a job keeps the policy it started with.
type policy struct {
	spec    Queue
	handler Handler // spec.Handler wrapped in its middleware
	limit   int32   // 0: none
}

func (w *Worker) newQueueState(q Queue) *queueState {
	switch {
	case q.PriorityLevels == 0:
		q.PriorityLevels = DefaultPriorityLevels
	case q.PriorityLevels < 0:
		q.PriorityLevels = 0
	}
	q.MaxAttempts = positiveOr(q.MaxAttempts, w.cfg.MaxAttempts)
	q.MaxDefers = positiveOr(q.MaxDefers, w.cfg.MaxDefers)
	q.Backoff.Base = positiveOr(q.Backoff.Base, w.cfg.Backoff.Base)
	q.Backoff.Cap = positiveOr(q.Backoff.Cap, w.cfg.Backoff.Cap)
	if q.Rate < 0 {
		w.log.Warn("negative queue rate ignored: the queue is not rate limited", slog.String("queue", q.Name), slog.Float64("rate", float64(q.Rate)))
	}
	if q.Rate < 0 || q.Rate == rate.Inf {
		q.Rate = 0
	}
	q.Burst = positiveOr(q.Burst, 1)
	limit := min(max(q.Concurrency, 0), w.cfg.Concurrency)
	prefetch := q.Prefetch
	if prefetch == 0 {
		prefetch = w.cfg.Concurrency
		if limit > 0 {
			prefetch = limit
		}
	}
	// A rate-limited queue starts at most Burst jobs at once: a broker that pushes
	// more ahead (RabbitMQ) would have them wait here claimed, unseen by other hosts.
	if q.Rate > 0 {
		prefetch = min(prefetch, q.Burst)
	}
	mw := append([]Middleware{Recover}, q.Middleware...)
	mw = append(mw, Deadline(q.Timeout))
	qs := &queueState{
		qc:      backend.QueueConfig{Name: q.Name, Prefetch: prefetch, PriorityLevels: q.PriorityLevels, KeyConcurrency: max(q.KeyConcurrency, 0)},
		drained: make(chan struct{}),
	}
	qs.policy.Store(&policy{spec: q, handler: Chain(q.Handler, mw...), limit: int32(limit)})
	return qs
}

// New returns a worker for b. Register queues, then Start it.
func New(b backend.Backend, cfg Config) *Worker {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Concurrency == 0:
		cfg.Concurrency = DefaultConcurrency
	case cfg.Concurrency < 0:
		log.Warn("worker concurrency clamped", slog.Int("from", cfg.Concurrency), slog.Int("to", 1))
		cfg.Concurrency = 1
	}
	cfg.MaxAttempts = positiveOr(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.MaxDefers = positiveOr(cfg.MaxDefers, DefaultMaxDefers)
	cfg.Backoff.Base = positiveOr(cfg.Backoff.Base, DefaultBackoffBase)
	cfg.Backoff.Cap = positiveOr(cfg.Backoff.Cap, DefaultBackoffCap)
	cfg.SettleTimeout = positiveOr(cfg.SettleTimeout, DefaultSettleTimeout)
	cfg.ReadyPoll = positiveOr(cfg.ReadyPoll, DefaultReadyPoll)
	if cfg.Jitter == nil {
		cfg.Jitter = backoff.Full
	}
	obs := cfg.Observer
	if obs == nil {
		obs = ObserverFunc(func(Event) {})
	}
	streamCtx, cancelStreams := context.WithCancel(context.Background())
	handlerCtx, cancelHandler := context.WithCancel(context.Background())
	settleCtx, cancelSettles := context.WithCancel(context.Background())
	stopCtx, cancelStop := context.WithCancel(context.Background())
	return &Worker{
		tracer:        telemetry.Tracer(cfg.TracerProvider),
		b:             b,
		cfg:           cfg,
		log:           log,
		obs:           obs,
		slots:         make(chan struct{}, cfg.Concurrency),
		tasks:         make(chan task),
		wake:          make(chan struct{}, 1),
		queues:        make(map[string]*queueState),
		stop:          make(chan struct{}),
		stopCtx:       stopCtx,
		cancelStop:    cancelStop,
		dispatchDone:  make(chan struct{}),
		streamCtx:     streamCtx,
		cancelStreams: cancelStreams,
		handlerCtx:    handlerCtx,
		cancelHandler: cancelHandler,
		settleCtx:     settleCtx,
		cancelSettles: cancelSettles,
	}
}

func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// ErrStopped is returned by Register and Start on a worker that is stopping.
var ErrStopped = errors.New("worker stopped")

// ErrLeftBehind is wrapped by Stop's error when a settle or a stream's end was still
// under way stopGrace past the drain deadline (a backend that ignores its context):
// Stop left it behind, running. Unlike the drain deadline alone, this is a fault of
// the backend.
var ErrLeftBehind = errors.New("left behind after the drain deadline")

// Start consumes every registered queue and starts taking jobs; ctx bounds the calls
// to the backend. It returns once every queue is consumed; Stop ends the work. If a
// queue cannot be consumed, Start ends the streams it opened and fails.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return ErrStopped
	}
	if w.started || w.starting {
		w.mu.Unlock()
		return errors.New("worker already started")
	}
	w.starting = true
	w.mu.Unlock()
	// Subscribe without the lock, until no queue is left: a queue registered meanwhile
	// is left to Start until started is set (its Register waits for Start's outcome),
	// then Register consumes it itself.
	done := make(map[*queueState]bool)
	for {
		w.mu.Lock()
		if w.stopping {
			w.mu.Unlock()
			w.abortStart(ErrStopped)
			return ErrStopped
		}
		var todo []*queueState
		for _, qs := range w.queues {
			if !qs.removed && qs.stream == nil && !done[qs] {
				todo = append(todo, qs)
			}
		}
		if len(todo) == 0 {
			w.started = true
			for _, qs := range w.queues {
				if qs.sub != nil && !isDone(qs.sub.done) {
					qs.sub.settle(nil)
				}
			}
			w.mu.Unlock()
			break
		}
		w.mu.Unlock()
		for _, qs := range todo {
			done[qs] = true
			if err := w.subscribe(ctx, qs); err != nil {
				w.abortStart(err)
				return err
			}
		}
	}
	for range w.cfg.Concurrency {
		go w.runner()
	}
	go w.dispatch()
	return nil
}

// abortStart ends the streams a failed Start opened, and fails the Registers waiting
// for it with err; the queues registered before Start stay for the next Start.
func (w *Worker) abortStart(err error) {
	w.mu.Lock()
	w.starting = false
	var ends []func()
	for _, qs := range w.queues {
		if qs.sub != nil && !isDone(qs.sub.done) {
			qs.sub.settle(fmt.Errorf("worker start failed: %w", err))
			qs.sub = newSubscription()
		}
		if s, cancel := qs.stream, qs.cancel; s != nil {
			qs.stream, qs.cancel = nil, nil
			ends = append(ends, func() { endStream(s, cancel) })
		}
	}
	w.mu.Unlock()
	for _, end := range ends {
		end()
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Stop drains the worker. It stops taking deliveries, then waits for every running job
// and its settle until ctx is done. If ctx is done first, it cancels the running
// handlers' contexts and the contexts of the settles under way (so that no settle
// outlives the drain, whatever the backend does), leaves the unsettled deliveries
// unacknowledged (the backend delivers them again), and returns an error that says how
// many jobs it left. Either way it ends every stream before it returns, their contexts
// first, so that a stream waiting for a lost connection gives up at once; it does not
// close the backend. Whatever the backend does, Stop returns within ctx plus stopGrace
// (twice at most: settles, then streams): a settle or a stream end that a misbehaving
// backend keeps past that is left behind, logged and reported in the error.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return errors.New("worker already stopped")
	}
	w.stopping = true
	started := w.started
	w.mu.Unlock()
	w.StopTaking()
	if started {
		<-w.dispatchDone
	}

	err := w.jobs.Wait(ctx)
	if err != nil {
		w.mu.Lock()
		w.abandoned = true
		w.mu.Unlock()
		left := w.jobs.Count()
		w.cancelHandler()
		w.cancelSettles()
		// Each settle returns once its context ended, if the backend keeps its promise.
		graceCtx, cancelGrace := context.WithTimeout(context.Background(), stopGrace)
		stuck := w.settling.Wait(graceCtx)
		cancelGrace()
		if stuck != nil {
			n := w.settling.Count()
			w.log.Error("settles still under way after the drain deadline: left behind", slog.Int("settles", n), slog.Duration("grace", stopGrace))
			err = fmt.Errorf("worker stop: drain timeout: %d jobs left unacknowledged, %d settles still under way %v after it (the backend ignores their context): %w: %w", left, n, stopGrace, ErrLeftBehind, err)
		} else {
			err = fmt.Errorf("worker stop: drain timeout: %d jobs left unacknowledged: %w", left, err)
		}
	}
	w.cancelStreams()
	w.mu.Lock()
	var ends []func()
	for _, qs := range w.queues {
		if s, cancel := qs.stream, qs.cancel; s != nil {
			qs.stream, qs.cancel = nil, nil
			ends = append(ends, func() { endStream(s, cancel) })
		}
	}
	w.mu.Unlock()
	// End the streams at once, each on its own, up to stopGrace past ctx.
	endCtx, cancelEnd := context.WithCancel(context.Background())
	defer cancelEnd()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancelEnd) })()
	var left atomic.Int32
	left.Store(int32(len(ends)))
	ended := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, end := range ends {
			wg.Go(func() { end(); left.Add(-1) })
		}
		wg.Wait()
		w.resubs.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-endCtx.Done():
		n := left.Load()
		w.log.Error("streams or resubscriptions did not end after the drain deadline: left behind", slog.Int("streams", int(n)), slog.Duration("grace", stopGrace))
		err = errors.Join(err, fmt.Errorf("worker stop: %d streams (or resubscriptions) did not end %v after the deadline: %w", n, stopGrace, ErrLeftBehind))
	}
	w.cancelHandler()
	w.cancelSettles()
	return err
}

// stopGrace is what Stop gives, past its context, to settles it cancelled and to
// streams it ends, before it reports them stuck and returns.
const stopGrace = time.Second

// StopTaking makes the worker take no new job from now on, at once, while the jobs
// running go on: the first step of a drain, for a host that has more to stop before
// it waits for them (Stop). Stop calls it too; calling it more than once is harmless.
func (w *Worker) StopTaking() {
	w.stopTaking.Do(func() {
		close(w.stop)
		w.cancelStop()
	})
}

// Running reports how many jobs of each registered queue are running.
func (w *Worker) Running() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.queues))
	for name, qs := range w.queues {
		out[name] = int(qs.running.Load())
	}
	return out
}
