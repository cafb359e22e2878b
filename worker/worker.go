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
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
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

// resubscribeBackoff paces the subscriptions again of a stream that ended.
var resubscribeBackoff = backoff.Policy{Base: 100 * time.Millisecond, Cap: 30 * time.Second}

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
}

// Worker runs the jobs of its registered queues. Create it with New, register queues,
// Start it, and Stop it to drain.
type Worker struct {
	b   backend.Backend
	cfg Config
	log *slog.Logger
	obs Observer

	slots chan struct{} // global capacity: a token per running job
	wake  chan struct{} // buffered 1: queues or their capacity changed

	mu        sync.Mutex
	queues    map[string]*queueState
	starting  bool // Start is subscribing
	started   bool
	stopping  bool
	abandoned bool

	stop          chan struct{}   // closed by Stop: take no more deliveries
	stopCtx       context.Context // done when stop is closed: ends resubscriptions
	cancelStop    context.CancelFunc
	dispatchDone  chan struct{} // closed when the dispatcher returns
	streamCtx     context.Context
	cancelStreams context.CancelFunc
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	settleCtx     context.Context // done at the drain deadline: settles end with it
	cancelSettles context.CancelFunc

	tasks    chan task // to the runners: one per slot, so a send never waits long
	jobs     tracker   // jobs from delivery to the end of their settle
	settling tracker   // settle calls under way
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

// subscription is the outcome of a queue's first subscription, which a Register of the
// same queue made meanwhile waits for, so that it does not report a queue served that
// is not.
type subscription struct {
	done chan struct{} // closed once err is set
	err  error
}

func newSubscription() *subscription { return &subscription{done: make(chan struct{})} }

// settle records the outcome and wakes the waiters. Call it with Worker.mu held, once.
func (s *subscription) settle(err error) {
	s.err = err
	close(s.done)
}

// wait returns the outcome, or ctx's error when ctx ends first.
func (s *subscription) wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// policy is what a job of a queue runs with; a job keeps the policy it started with.
type policy struct {
	spec    Queue
	handler Handler // spec.Handler wrapped in its middleware
	limit   int32   // 0: none
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

// Register declares q on the backend and, once the worker is started, consumes it.
// Registering a queue that is already registered replaces its handler and policies
// for the jobs that start from then on; its stream, prefetch and priority levels stay.
// If the queue cannot be consumed, Register fails and the queue is not registered, so
// that registering it again tries again. Register returns only once it knows: a
// Register made while Start is subscribing, or while another Register of the same new
// queue is, waits for that outcome and fails with it. ctx bounds the calls to the
// backend and that wait.
func (w *Worker) Register(ctx context.Context, q Queue) error {
	if q.Handler == nil {
		return fmt.Errorf("register queue %q: nil handler", q.Name)
	}
	qs := w.newQueueState(q)
	if err := w.b.Declare(ctx, qs.qc); err != nil {
		return fmt.Errorf("register queue %q: %w", q.Name, err)
	}
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return ErrStopped
	}
	if old, ok := w.queues[q.Name]; ok && !old.removed {
		// Keep the stream and the running count; swap the policy.
		old.policy.Store(qs.policy.Load())
		w.signal()
		sub := old.sub
		if !w.started && !w.starting {
			sub = nil // Start consumes it, and says how that went
		}
		w.mu.Unlock()
		if sub == nil {
			return nil
		}
		if err := sub.wait(ctx); err != nil {
			return fmt.Errorf("register queue %q: %w", q.Name, err)
		}
		return nil
	}
	qs.life, qs.endLife = context.WithCancel(w.stopCtx)
	qs.sub = newSubscription()
	w.queues[q.Name] = qs
	started, starting := w.started, w.starting
	w.mu.Unlock()
	var err error
	switch {
	case !started && !starting:
		return nil // Start consumes it
	case started:
		// No lock across the backend: settles and the dispatcher go on meanwhile.
		err = w.subscribe(ctx, qs)
		w.mu.Lock()
		qs.sub.settle(err)
		w.mu.Unlock()
	default:
		// Start subscribes it, in its loop: its outcome is Start's.
		err = qs.sub.wait(ctx)
	}
	if err != nil {
		w.forget(qs)
		return fmt.Errorf("register queue %q: %w", q.Name, err)
	}
	return nil
}

// forget removes a queue whose registration failed: nothing consumes it, and a
// subscription still under way for it gives up.
func (w *Worker) forget(qs *queueState) {
	w.mu.Lock()
	if w.queues[qs.qc.Name] == qs {
		delete(w.queues, qs.qc.Name)
	}
	qs.removed = true
	s, cancel := qs.stream, qs.cancel
	qs.stream, qs.cancel = nil, nil
	w.signal()
	w.mu.Unlock()
	qs.endLife()
	endStream(s, cancel)
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
		qc:      backend.QueueConfig{Name: q.Name, Prefetch: prefetch, PriorityLevels: q.PriorityLevels},
		drained: make(chan struct{}),
	}
	qs.policy.Store(&policy{spec: q, handler: Chain(q.Handler, mw...), limit: int32(limit)})
	return qs
}

// unwanted reports whether qs is no longer to be consumed, and what subscribe then
// returns: ErrStopped while the worker stops, nil for a queue that was removed.
func (w *Worker) unwanted(qs *queueState) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.stopping:
		return true, ErrStopped
	case qs.removed:
		return true, nil
	}
	return false, nil
}

// subscribe starts consuming qs, without w.mu held: Consume can wait on the network.
// ctx and the queue's life bound the call; the stream itself lives until Stop ends the
// streams or the queue is unregistered. A queue removed before or during the call is
// not consumed; a worker stopping meanwhile fails with ErrStopped.
func (w *Worker) subscribe(ctx context.Context, qs *queueState) error {
	if done, err := w.unwanted(qs); done {
		return err
	}
	ctx, endCall := context.WithCancel(ctx)
	defer endCall()
	defer context.AfterFunc(qs.life, endCall)()
	sctx, cancel := context.WithCancel(w.streamCtx)
	stop := context.AfterFunc(ctx, cancel)
	s, err := w.b.Consume(sctx, qs.qc)
	if !stop() && err == nil {
		// ctx or the queue's life ended during the call, and with it the new stream's
		// context.
		err = ctx.Err()
		s.Drop()
	}
	if err != nil {
		cancel()
		if done, err := w.unwanted(qs); done {
			return err // stopping, or the queue went while the call waited
		}
		return fmt.Errorf("consume queue %q: %w", qs.qc.Name, err)
	}
	w.mu.Lock()
	if w.stopping || qs.removed {
		stopping := w.stopping
		w.mu.Unlock()
		cancel()
		s.Drop()
		if stopping {
			return ErrStopped
		}
		return nil
	}
	qs.stream, qs.cancel = s, cancel
	w.signal()
	w.mu.Unlock()
	return nil
}

// endStream ends a stream taken from its queue: its context first, so that a stream
// waiting for a lost connection gives up, then Drop, which returns what it holds.
func endStream(s backend.Stream, cancel context.CancelFunc) {
	if cancel != nil {
		cancel()
	}
	if s != nil {
		s.Drop()
	}
}

// Unregister stops taking jobs from the queue, waits for its running jobs to finish
// and settle (or for ctx), then ends its stream: whatever the stream held goes back to
// the backend. Queued jobs stay in the backend.
func (w *Worker) Unregister(ctx context.Context, name string) error {
	w.mu.Lock()
	qs, ok := w.queues[name]
	if !ok || qs.removed {
		w.mu.Unlock()
		return fmt.Errorf("unregister queue %q: not registered", name)
	}
	qs.removed = true
	if qs.running.Load() == 0 {
		qs.drainOnce.Do(func() { close(qs.drained) })
	}
	w.signal()
	w.mu.Unlock()
	qs.endLife() // a subscription under way or waiting to try again gives up

	var err error
	select {
	case <-qs.drained:
	case <-ctx.Done():
		err = fmt.Errorf("unregister queue %q: %d jobs still running, left unacknowledged: %w", name, qs.running.Load(), ctx.Err())
	}
	w.mu.Lock()
	s, cancel := qs.stream, qs.cancel
	qs.stream, qs.cancel = nil, nil
	if w.queues[name] == qs {
		delete(w.queues, name)
	}
	w.mu.Unlock()
	endStream(s, cancel)
	return err
}

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

// task is a delivery on its way to a runner.
type task struct {
	qs *queueState
	d  backend.Delivery
}

// runner runs the tasks the dispatcher hands it until the dispatcher ends. Long-lived
// runners, one per slot, keep their grown stacks: a goroutine per job costs more.
func (w *Worker) runner() {
	for t := range w.tasks {
		w.process(t.qs, t.d)
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
	close(w.stop)
	w.cancelStop()
	w.mu.Unlock()
	if started {
		<-w.dispatchDone
	}

	err := w.jobs.wait(ctx)
	if err != nil {
		w.mu.Lock()
		w.abandoned = true
		w.mu.Unlock()
		left := w.jobs.count()
		w.cancelHandler()
		w.cancelSettles()
		// Each settle returns once its context ended, if the backend keeps its promise.
		graceCtx, cancelGrace := context.WithTimeout(context.Background(), stopGrace)
		stuck := w.settling.wait(graceCtx)
		cancelGrace()
		if stuck != nil {
			n := w.settling.count()
			w.log.Error("settles still under way after the drain deadline: left behind", slog.Int("settles", n), slog.Duration("grace", stopGrace))
			err = fmt.Errorf("worker stop: drain timeout: %d jobs left unacknowledged, %d settles still under way %v after it (the backend ignores their context): %w", left, n, stopGrace, err)
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
		err = errors.Join(err, fmt.Errorf("worker stop: %d streams (or resubscriptions) did not end %v after the deadline", n, stopGrace))
	}
	w.cancelHandler()
	w.cancelSettles()
	return err
}

// stopGrace is what Stop gives, past its context, to settles it cancelled and to
// streams it ends, before it reports them stuck and returns.
const stopGrace = time.Second

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

// signal wakes the dispatcher to look at the queues again.
func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// dispatch is the capacity loop: a slot first, then a delivery.
func (w *Worker) dispatch() {
	defer close(w.dispatchDone)
	defer close(w.tasks)
	var d dispatcher
	for {
		select {
		case w.slots <- struct{}{}:
		case <-w.stop:
			return
		}
		qs, del, ok := d.next(w)
		if !ok {
			<-w.slots
			return
		}
		w.mu.Lock()
		if qs.removed {
			// Unregister counts on no job of the queue starting once it is removed: leave
			// the delivery unsettled; dropping the stream gives it back to the backend.
			w.mu.Unlock()
			<-w.slots
			continue
		}
		qs.running.Add(1)
		w.jobs.add()
		w.mu.Unlock()
		w.tasks <- task{qs, del}
	}
}

// dispatcher picks the next delivery among the eligible queues: round robin over those
// with a delivery waiting, blocking on all of them when none has.
type dispatcher struct {
	eligible []*queueState
	streams  []backend.Stream
	cases    []reflect.SelectCase
	rr       int
}

// next returns the next delivery and its queue, or false when the worker stops.
func (d *dispatcher) next(w *Worker) (*queueState, backend.Delivery, bool) {
	for {
		notReady, rateWait := d.collect(w)
		n := len(d.eligible)
		for i := range n {
			k := (d.rr + i) % n
			select {
			case del, ok := <-d.streams[k].Deliveries():
				if !ok {
					w.streamEnded(d.eligible[k], d.streams[k])
					continue
				}
				d.rr = k + 1
				return d.take(d.eligible[k], del)
			default:
			}
		}
		// Nothing waiting: block on every eligible stream, the stop signal, a change of
		// queues or capacity, a poll for handlers that are not ready, and the moment a
		// rate-limited queue may take its next job.
		d.cases = append(d.cases[:0],
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stop)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.wake)})
		if notReady {
			rateWait = min(rateWait, w.cfg.ReadyPoll)
		}
		if rateWait < noWait {
			d.cases = append(d.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(rateWait))})
		}
		base := len(d.cases)
		for _, s := range d.streams {
			d.cases = append(d.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.Deliveries())})
		}
		chosen, v, ok := reflect.Select(d.cases)
		switch {
		case chosen == 0:
			return nil, nil, false
		case chosen < base:
			continue
		case !ok:
			w.streamEnded(d.eligible[chosen-base], d.streams[chosen-base])
			continue
		default:
			d.rr = chosen - base + 1
			return d.take(d.eligible[chosen-base], v.Interface().(backend.Delivery))
		}
	}
}

// noWait is collect's answer when no queue waits for its rate limit.
const noWait = time.Duration(1<<63 - 1)

// take spends the rate-limited queue's token for the delivery it just took. collect
// offered the queue's stream only once a token was there, and only the dispatcher
// spends them, so the token is still there.
func (d *dispatcher) take(qs *queueState, del backend.Delivery) (*queueState, backend.Delivery, bool) {
	// The limiter is read without Worker.mu: only the dispatcher's goroutine uses it.
	if lim := qs.limiter; lim != nil && qs.policy.Load().spec.Rate > 0 {
		lim.ReserveN(time.Now(), 1)
	}
	return qs, del, true
}

// collect gathers the queues that may take a job now; it reports whether any was
// skipped only because its handler was not ready, and how long until the first queue
// skipped for its rate limit may take one (noWait when none was).
func (d *dispatcher) collect(w *Worker) (notReady bool, rateWait time.Duration) {
	d.eligible, d.streams = d.eligible[:0], d.streams[:0]
	rateWait = noWait
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, qs := range w.queues {
		pol := qs.policy.Load()
		if qs.removed || qs.stream == nil || (pol.limit > 0 && qs.running.Load() >= pol.limit) {
			continue
		}
		if r, ok := pol.spec.Handler.(Readier); ok && !r.Ready() {
			notReady = true
			continue
		}
		// Capacity first (the slot is held, the queue has room), then the rate: a
		// queue is offered only when it may take a job now, so that no job is claimed
		// to wait for its turn.
		if wait := qs.untilToken(pol, now); wait > 0 {
			rateWait = min(rateWait, wait)
			continue
		}
		d.eligible = append(d.eligible, qs)
		d.streams = append(d.streams, qs.stream)
	}
	return notReady, rateWait
}

// untilToken returns how long until the queue's limiter has a token to spend, 0 when
// it has one now or the queue has no rate. It makes the limiter, or brings its rate
// and burst up to a new registration's.
func (qs *queueState) untilToken(pol *policy, now time.Time) time.Duration {
	r, burst := pol.spec.Rate, pol.spec.Burst
	if r <= 0 {
		return 0
	}
	switch {
	case qs.limiter == nil:
		qs.limiter = rate.NewLimiter(r, burst)
	case qs.limiter.Limit() != r || qs.limiter.Burst() != burst:
		qs.limiter.SetLimitAt(now, r)
		qs.limiter.SetBurstAt(now, burst)
	}
	missing := 1 - qs.limiter.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	// Rounded up, and at least 1ns: a wait that ends a hair early would only find
	// the token still missing and wait again. Computed in float and capped: a tiny
	// rate's wait overflows a Duration, whose conversion would then be anything (1ns
	// on amd64, a spinning dispatcher). A capped wait that ends early waits again.
	ns := math.Ceil(missing / float64(r) * float64(time.Second))
	if ns >= float64(maxRateWait) {
		return maxRateWait
	}
	return max(time.Duration(ns), 1)
}

// maxRateWait caps the dispatcher's wait for a rate-limited queue's next token.
const maxRateWait = time.Hour

// streamEnded handles a stream that ended by itself: unless the worker or the queue is
// going away, it subscribes again after a pause.
func (w *Worker) streamEnded(qs *queueState, s backend.Stream) {
	err := s.Err()
	w.mu.Lock()
	defer w.mu.Unlock()
	if qs.stream != s {
		return
	}
	qs.cancel() // frees the ended stream's context
	qs.stream, qs.cancel = nil, nil
	if w.stopping || qs.removed {
		return
	}
	if errors.Is(err, backend.ErrShutDown) {
		w.log.Error("backend shut down: queue no longer consumed", slog.String("queue", qs.qc.Name))
		return
	}
	w.log.Warn("stream ended; subscribing again", slog.String("queue", qs.qc.Name), slog.Any("error", err))
	w.resubs.Add(1)
	go w.resubscribe(qs)
}

// resubscribe consumes qs again, with backoff, until it succeeds, the backend is shut
// down, the queue is removed (Unregister ends its life, and with it a wait or a call
// under way) or the worker stops. It holds no lock while it waits or
// calls the backend.
func (w *Worker) resubscribe(qs *queueState) {
	defer w.resubs.Done()
	p := resubscribeBackoff
	p.Jitter = w.cfg.Jitter
	// A pause before the first attempt too: a stream that ends at once must not spin.
	if backoff.Sleep(qs.life, p.Delay(1)) != nil {
		return
	}
	backoff.Retry(qs.life, p, func(ctx context.Context, _ int) error {
		err := w.subscribe(ctx, qs)
		switch {
		case err == nil, errors.Is(err, ErrStopped), ctx.Err() != nil:
			return backoff.Permanent(err)
		case errors.Is(err, backend.ErrShutDown):
			w.log.Error("backend shut down: queue no longer consumed", slog.String("queue", qs.qc.Name))
			return backoff.Permanent(err)
		}
		w.log.Warn("subscribing again failed", slog.String("queue", qs.qc.Name), slog.Any("error", err))
		return err
	})
}

// tracker counts work under way and lets a caller wait for it to reach zero.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n reaches zero; nil when nobody waits
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// wait returns when the count is zero, or ctx's error when ctx is done first.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
