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

// slowAcks wraps a backend so that every Ack takes ackTime.
type slowAcks struct {
	backend.Backend
	ackTime time.Duration
	acked   atomic.Int32
}

func (s *slowAcks) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	st, err := s.Backend.Consume(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make(chan backend.Delivery)
	go func() {
		defer close(out)
		for d := range st.Deliveries() {
			out <- &slowAck{Delivery: d, b: s}
		}
	}()
	return &wrappedStream{Stream: st, ch: out}, nil
}

type slowAck struct {
	backend.Delivery
	b *slowAcks
}

func (d *slowAck) Ack(ctx context.Context) error {
	time.Sleep(d.b.ackTime)
	err := d.Delivery.Ack(ctx)
	if err == nil {
		d.b.acked.Add(1)
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
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		b := &slowAcks{Backend: mb, ackTime: 2 * time.Second}
		w := worker.New(b, worker.Config{})
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(5 * time.Second)
			return worker.Result{}
		})
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mb.Publish(ctx, backend.NewEnvelope("q", nil), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		start := time.Now()
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// The job had 4 s to run and its ack 2 s: Stop returns only after both.
		if took := time.Since(start); took != 6*time.Second || b.acked.Load() != 1 {
			t.Fatalf("Stop returned after %v with %d acks, want 6s and 1", took, b.acked.Load())
		}
		if st, _ := mb.Stats("q"); st.Acked != 1 || st.Pending+st.Unacked != 0 {
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
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			<-release
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
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

func TestStreamLostIsResubscribed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mb := memory.New(memory.Config{})
		defer mb.Close(ctx)
		f := &flaky{Backend: mb}
		w := worker.New(f, worker.Config{})
		var ran atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			ran.Add(1)
			return worker.Result{}
		})
		if err := w.Register(ctx, worker.Queue{Name: "q", Handler: h}); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := mb.Publish(ctx, backend.NewEnvelope("q", nil), 0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Minute)
		st, _ := mb.Stats("q")
		if f.consumed.Load() != 2 || st.Acked+st.Pending != 5 || ran.Load() < 5 {
			t.Fatalf("consumed %d times, ran %d, stats %+v", f.consumed.Load(), ran.Load(), st)
		}
		if err := w.Stop(ctx); err != nil {
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
