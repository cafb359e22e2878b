package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestRateLimitedQueueClaimsNoMoreThanItCanStart runs a rate-limited queue (burst 2,
// concurrency 10) on the real broker over a backlog of 10: the broker pushes the
// worker no more than the burst, and the rest stays ready for other hosts.
func TestRateLimitedQueueClaimsNoMoreThanItCanStart(t *testing.T) {
	t.Parallel()
	url := testbroker.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	q := "wt-rate-" + backend.NewID()[18:]
	t.Cleanup(func() {
		b.Close(context.Background())
		testbroker.DeleteQueues(t, url, q)
	})
	if err := b.Declare(ctx, backend.QueueConfig{Name: q, Prefetch: 10, PriorityLevels: worker.DefaultPriorityLevels}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := b.Publish(ctx, backend.NewEnvelope(q, []byte("x")), 0); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		started <- struct{}{}
		<-release
		return worker.Result{Outcome: worker.Ack}
	})
	w := worker.New(b, worker.Config{Concurrency: 10})
	if err := w.Register(ctx, worker.Queue{Name: q, Handler: h, Concurrency: 10, Rate: 0.001, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		w.Stop(context.Background())
	}()
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the burst's two jobs did not start")
		}
	}
	// The broker pushed its prefetch when the worker subscribed, before either job
	// started: what is not ready now was pushed to the worker.
	st, err := b.QueueStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 8 {
		t.Errorf("%d jobs ready after the burst of 2 started, want 8 (the rest claimed by a worker that cannot start them): %+v", st.Pending, st)
	}
}
