package worker_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestPartialChildPublishIsNotRepeated: child 2 of 3 fails to publish (its queue is
// not declared yet), so the parent is retried and publishes all three again. The
// children keep the ids derived from the parent and their index, so child 1, still
// queued, is not published a second time under a new id.
func TestPartialChildPublishIsNotRepeated(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var b *memory.Backend
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 2 {
				if err := b.Declare(ctx, backend.QueueConfig{Name: "later"}); err != nil {
					return worker.Result{Outcome: worker.DeadLetter, Reason: err.Error()}
				}
			}
			return worker.Result{Children: []worker.Child{
				{Queue: "child", Payload: []byte("1")},
				{Queue: "later", Payload: []byte("2")},
				{Queue: "child", Payload: []byte("3")},
			}}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		b = r.b
		if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
			t.Fatal(err)
		}
		parent := r.publish("q", "parent")
		time.Sleep(time.Minute)
		synctest.Wait()
		if s := r.settled(); len(s) != 2 || s[0].Settle != worker.SettleRetry || s[1].Settle != worker.SettleAck {
			t.Fatalf("settles %+v, want a retry then an ack", s)
		}
		var got []string
		for _, q := range []string{"child", "later"} {
			pending, err := r.b.Pending(q)
			if err != nil {
				t.Fatal(err)
			}
			for _, env := range pending {
				got = append(got, string(env.Payload)+"="+env.ID)
			}
		}
		slices.Sort(got)
		want := []string{"1=" + backend.ChildID(parent.ID, 0, "child", []byte("1")), "2=" + backend.ChildID(parent.ID, 1, "later", []byte("2")),
			"3=" + backend.ChildID(parent.ID, 2, "child", []byte("3"))}
		if !slices.Equal(got, want) {
			t.Fatalf("children queued %v, want each once with its derived id %v", got, want)
		}
	})
}

// TestRetriedParentWithADifferentChild: a retried parent that stages another child at
// an index than its first attempt did (here another payload) publishes a new job: the
// backend does not drop it as a repeat of the first attempt's child, still queued.
func TestRetriedParentWithADifferentChild(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 1 {
				return worker.Result{Children: []worker.Child{
					{Queue: "child", Payload: []byte("first attempt")},
					{Queue: "undeclared", Payload: []byte("fails")},
				}}
			}
			return worker.Result{Children: []worker.Child{{Queue: "child", Payload: []byte("second attempt")}}}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
			t.Fatal(err)
		}
		r.publish("q", "parent")
		time.Sleep(time.Minute)
		synctest.Wait()
		if s := r.settled(); len(s) != 2 || s[0].Settle != worker.SettleRetry || s[1].Settle != worker.SettleAck {
			t.Fatalf("settles %+v, want a retry then an ack", s)
		}
		pending, err := r.b.Pending("child")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, env := range pending {
			got = append(got, string(env.Payload))
		}
		slices.Sort(got)
		if want := []string{"first attempt", "second attempt"}; !slices.Equal(got, want) {
			t.Fatalf("children queued %q, want %q: a different child is a new job", got, want)
		}
	})
}
