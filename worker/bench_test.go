package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

// BenchmarkWorkerNoop measures the pipeline's cost per job: a no-op Go handler, jobs
// queued beforehand in the memory backend, timed from Start until every job is acked.
func BenchmarkWorkerNoop(b *testing.B) {
	for _, concurrency := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			ctx := context.Background()
			mb := memory.New(memory.Config{})
			defer mb.Close(ctx)
			var settled atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			w := worker.New(mb, worker.Config{
				Concurrency: concurrency,
				Observer: worker.ObserverFunc(func(e worker.Event) {
					if e.Kind == worker.EventSettled && settled.Add(1) == n {
						close(done)
					}
				}),
			})
			noop := worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })
			if err := w.Register(ctx, worker.Queue{Name: "bench", Handler: noop}); err != nil {
				b.Fatal(err)
			}
			env := backend.NewEnvelope("bench", []byte(`{"n":1}`))
			for range b.N {
				env.ID = backend.NewID() // one job each: the backend drops a repeated id
				if err := mb.Publish(ctx, env, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := w.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-done
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			if err := w.Stop(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
