package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/backoff"
)

// resubscribeBackoff paces the subscriptions again of a stream that ended.
var resubscribeBackoff = backoff.Policy{Base: 100 * time.Millisecond, Cap: 30 * time.Second}

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
