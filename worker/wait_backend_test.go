package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestWaitFanIn: on the memory backend, a parent that waits for its children runs
// again at the same attempt, round 1, with every awaited child's id, state, output
// and reason in the order it staged them; a child that is not awaited runs but is not
// among them; a second wait's children get other ids.
func TestWaitFanIn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			attempt, round int
			awaited        []backend.AwaitResult
		}
		var mu sync.Mutex
		var runs []seen
		var ids [2][]string
		parent := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			mu.Lock()
			runs = append(runs, seen{j.Attempt, j.Round, j.Awaited})
			mu.Unlock()
			if j.Round < 2 {
				var kids []worker.Child
				for i := range 3 {
					kids = append(kids, worker.Child{Queue: "kids", Payload: fmt.Appendf(nil, "r%d-%d", j.Round, i), Await: i != 1})
				}
				kids[2].Payload = []byte("fail")
				return worker.Result{Outcome: worker.Wait, Children: kids}
			}
			return worker.Result{Output: []byte("joined")}
		})
		kids := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if string(j.Envelope.Payload) == "fail" {
				return worker.Result{Outcome: worker.DeadLetter, Reason: "no page"}
			}
			return worker.Result{Output: append([]byte("out "), j.Envelope.Payload...)}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "p", Handler: parent}, worker.Queue{Name: "kids", Handler: kids})
		env := r.publish("p", "fan out")
		time.Sleep(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		if len(runs) != 3 {
			t.Fatalf("the parent ran %d times, want 3 (first run, two resumed)", len(runs))
		}
		for round, run := range runs {
			if run.attempt != 1 || run.round != round {
				t.Fatalf("run %d: attempt %d round %d, want attempt 1 round %d", round, run.attempt, run.round, round)
			}
			if round == 0 {
				if run.awaited != nil {
					t.Fatalf("a first run has awaited results: %+v", run.awaited)
				}
				continue
			}
			prev := round - 1
			want := []backend.AwaitResult{
				{ID: backend.ChildID(env.ID, prev, 0, "kids", fmt.Appendf(nil, "r%d-0", prev)), Queue: "kids", State: backend.JobSucceeded,
					Output: fmt.Appendf(nil, "out r%d-0", prev)},
				{ID: backend.ChildID(env.ID, prev, 2, "kids", []byte("fail")), Queue: "kids", State: backend.JobDead, Reason: "no page"},
			}
			if len(run.awaited) != len(want) {
				t.Fatalf("round %d read %+v, want %+v", round, run.awaited, want)
			}
			for i, w := range want {
				g := run.awaited[i]
				if g.ID != w.ID || g.Queue != w.Queue || g.State != w.State || g.Reason != w.Reason || string(g.Output) != string(w.Output) || g.OutputTruncated {
					t.Fatalf("round %d child %d = %+v, want %+v", round, i, g, w)
				}
				ids[prev] = append(ids[prev], g.ID)
			}
		}
		for _, a := range ids[0] {
			for _, b := range ids[1] {
				if a == b {
					t.Fatalf("rounds 0 and 1 staged a child under the same id %s", a)
				}
			}
		}
	})
}
