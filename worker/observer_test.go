package worker_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/wasmjobs/wasmjobs/worker"
)

// TestEveryDeliveryStartsBeforeItEnds: each delivery, one that cannot be decoded too,
// reports EventStarted and then exactly one ending event, so observers can count what
// is in flight.
func TestEveryDeliveryStartsBeforeItEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			return worker.Result{Outcome: worker.Ack}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "fine")
		if err := r.b.InjectMalformed(context.Background(), "q", []byte("garbage"), "attempt header is not a number"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r.stop(0)
		r.mu.Lock()
		defer r.mu.Unlock()
		started := map[string]bool{}
		ended := map[string]int{}
		for _, e := range r.events {
			id := e.Job.Envelope.ID
			if e.Kind == worker.EventStarted {
				if started[id] {
					t.Errorf("job %s started twice", id)
				}
				started[id] = true
				continue
			}
			if !started[id] {
				t.Errorf("job %s: %s without started before it", id, e.Kind)
			}
			ended[id]++
		}
		if len(started) != 2 || len(ended) != 2 {
			t.Fatalf("started %v, ended %v: want both jobs to start and end", started, ended)
		}
		for id, n := range ended {
			if n != 1 {
				t.Errorf("job %s ended %d times", id, n)
			}
		}
	})
}
