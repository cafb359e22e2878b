package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestDecideWait: a Wait with an awaited child is a wait, whatever else it staged; one
// without is a failure, retried (dead-lettered at the last attempt) with a reason that
// says so.
func TestDecideWait(t *testing.T) {
	t.Parallel()
	awaited := []worker.Child{{Queue: "render", Payload: []byte("p1")}, {Queue: "render", Payload: []byte("p2"), Await: true}}
	for _, tc := range []struct {
		name     string
		job      worker.Job
		children []worker.Child
		settle   worker.Outcome
		reason   string
	}{
		{"awaited child", worker.Job{Attempt: 1, MaxAttempts: 3}, awaited, worker.Wait, ""},
		{"awaited child at the last attempt", worker.Job{Attempt: 3, MaxAttempts: 3}, awaited, worker.Wait, ""},
		{"no child", worker.Job{Attempt: 1, MaxAttempts: 3}, nil, worker.Retry, "wait without an awaited child"},
		{"the last round a job may wait", worker.Job{Attempt: 1, MaxAttempts: 3, Round: worker.MaxRounds - 1}, awaited, worker.Wait, ""},
		{"a wait past the rounds", worker.Job{Attempt: 1, MaxAttempts: 3, Round: worker.MaxRounds}, awaited, worker.DeadLetter,
			fmt.Sprintf("max rounds (%d) exceeded: the job waited for children %d times", worker.MaxRounds, worker.MaxRounds)},
		{"children, none awaited", worker.Job{Attempt: 1, MaxAttempts: 3}, awaited[:1], worker.Retry, "wait without an awaited child"},
		{"no awaited child at the last attempt", worker.Job{Attempt: 3, MaxAttempts: 3}, nil, worker.DeadLetter,
			"max attempts (3) exceeded: wait without an awaited child"},
	} {
		settle, reason := worker.Decide(&tc.job, worker.Result{Outcome: worker.Wait, Children: tc.children}, 0)
		if settle != tc.settle || reason != tc.reason {
			t.Errorf("%s: Decide = %s %q, want %s %q", tc.name, settle, reason, tc.settle, tc.reason)
		}
	}
}

// plainDeliveries wraps a backend so that its deliveries are plain backend.Delivery
// values, as a broker's are: they can neither settle atomically nor wait.
func plainDeliveries(b backend.Backend) backend.Backend {
	return &mapDeliveries{Backend: b, wrap: func(d backend.Delivery) backend.Delivery { return plainDelivery{d} }}
}

type plainDelivery struct{ backend.Delivery }

// settleNames is how the rig's jobs settled so far, in order, joined by spaces.
func (r *rig) settleNames() string {
	var names []string
	for _, e := range r.settled() {
		names = append(names, e.Settle.String())
	}
	return strings.Join(names, " ")
}

// TestWaitWhereDeliveriesCannotWait: a Wait on a backend whose deliveries cannot wait
// is never acked: the job fails the retry way, with a reason naming the problem, and
// none of its children is published.
func TestWaitWhereDeliveriesCannotWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 1 {
				return worker.Result{Outcome: worker.Wait, Children: []worker.Child{{Queue: "kids", Payload: []byte("k"), Await: true},
					{Queue: "kids", Payload: []byte("side")}}}
			}
			return worker.Result{}
		})
		var kids runLog
		r := newRigOn(t, plainDeliveries, worker.Config{}, worker.Queue{Name: "q", Handler: h},
			worker.Queue{Name: "kids", Handler: kids.handler(func(context.Context, *worker.Job) worker.Result { return worker.Result{} })})
		r.publish("q", "parent")
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 2 || runs[1].attempt != 2 || !strings.Contains(runs[1].env.Reason, "cannot wait") ||
			!strings.Contains(runs[1].env.Reason, "WaitingDelivery") {
			t.Fatalf("runs = %+v, want a retry whose reason says the deliveries cannot wait", runs)
		}
		if n := len(kids.all()); n != 0 {
			t.Fatalf("%d children ran; a wait that could not be served publishes none", n)
		}
		if settles := r.settleNames(); settles != "retry ack" {
			t.Fatalf("settles %q, want retry then ack", settles)
		}
	})
}

// TestResumedRunNeedsAwaitedResults: a delivery at round 1 whose backend gives no
// awaited results never reaches the handler: it fails, saying why.
func TestResumedRunNeedsAwaitedResults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result { return worker.Result{} })
		r := newRigOn(t, plainDeliveries, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "resumed", func(e *backend.Envelope) { e.Round = 1; e.MaxAttempts = 1 })
		time.Sleep(time.Minute)
		if n := len(log.all()); n != 0 {
			t.Fatalf("the handler ran %d times without its children's results", n)
		}
		dl := r.dead("q")
		if len(dl) != 1 || !strings.Contains(dl[0].Reason, "round 1") || !strings.Contains(dl[0].Reason, "AwaitedDelivery") {
			t.Fatalf("dead letters %+v, want one whose reason names the missing results", dl)
		}
	})
}

// noResults is a delivery that can give awaited results but has none.
type noResults struct{ backend.Delivery }

func (noResults) Awaited(context.Context) ([]backend.AwaitResult, error) { return nil, nil }

// TestResumedRunWithNoResults: a delivery at round 1 whose backend gives an empty list
// of awaited results never reaches the handler, which would take itself for a first run
// and fan out again: it fails the retry way and is dead-lettered at the last attempt,
// saying why.
func TestResumedRunWithNoResults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result { return worker.Result{} })
		empty := func(b backend.Backend) backend.Backend {
			return &mapDeliveries{Backend: b, wrap: func(d backend.Delivery) backend.Delivery { return noResults{d} }}
		}
		r := newRigOn(t, empty, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "resumed", func(e *backend.Envelope) { e.Round = 1; e.MaxAttempts = 2 })
		time.Sleep(time.Minute)
		if n := len(log.all()); n != 0 {
			t.Fatalf("the handler ran %d times without its children's results", n)
		}
		if settles := r.settleNames(); settles != "retry dead_letter" {
			t.Fatalf("settles %q, want retry then dead_letter", settles)
		}
		dl := r.dead("q")
		if len(dl) != 1 || !strings.Contains(dl[0].Reason, "round 1") || !strings.Contains(dl[0].Reason, "no results of its awaited children") {
			t.Fatalf("dead letters %+v, want one whose reason says the results are missing", dl)
		}
	})
}
