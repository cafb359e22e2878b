package worker_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

// A worker with a plain Go handler: jobs whose payload is not upper case are
// dead-lettered, the others acknowledged.
func Example() {
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)

	done := make(chan struct{}, 2)
	w := worker.New(b, worker.Config{
		Concurrency: 4,
		Observer: worker.ObserverFunc(func(e worker.Event) {
			if e.Kind == worker.EventSettled {
				fmt.Println(strings.TrimSpace(fmt.Sprintf("%s: %s %s", e.Job.Envelope.Payload, e.Settle, e.Reason)))
				done <- struct{}{}
			}
		}),
	})
	shout := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) worker.Result {
		p := string(job.Envelope.Payload)
		if p != strings.ToUpper(p) {
			return worker.Result{Outcome: worker.DeadLetter, Reason: "not shouting"}
		}
		return worker.Result{Outcome: worker.Ack}
	})
	if err := w.Register(ctx, worker.Queue{Name: "shout", Handler: shout}); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	_ = b.Publish(ctx, backend.NewEnvelope("shout", []byte("HELLO")), 0)
	<-done
	_ = b.Publish(ctx, backend.NewEnvelope("shout", []byte("hello")), 0)
	<-done

	drain, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(drain); err != nil {
		panic(err)
	}
	// Output:
	// HELLO: ack
	// hello: dead_letter not shouting
}
