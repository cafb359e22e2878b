package pebble

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
)

// A dependent waits, across a restart, until the job it awaits has ended, and reads
// its result; a parent that waits for its children is delivered again at the same
// attempt with its round one higher, reading theirs, also across a restart.
func TestWaitingJobsSurviveARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := vfs.NewMem()
	b := openMem(t, fs, Config{})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "a", Queue: "q"}}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "b", Queue: "q"}}, Await: backend.Await{IDs: []string{"a"}}},
	}))
	if rec, err := b.JobRecord(ctx, "b"); err != nil || rec.State != backend.JobWaiting {
		t.Fatalf("b's record: %+v, %v; want waiting", rec.State, err)
	}
	rig.Must(t, b.Close(ctx))

	b = openMem(t, fs, Config{})
	if got := b.Recovered().Waiting; got != 1 {
		t.Fatalf("Recovered().Waiting = %d, want 1", got)
	}
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 4})
	rig.Must(t, err)
	d := next(t, s)
	env, _ := d.Envelope()
	if env.ID != "a" {
		t.Fatalf("first delivery %s, want a (b waits)", env.ID)
	}
	rig.Must(t, d.(backend.AtomicDelivery).AckWith(ctx, nil, &backend.JobRecord{Output: []byte("from a")}))
	d = next(t, s)
	env, _ = d.Envelope()
	if env.ID != "b" || env.Round != 0 {
		t.Fatalf("second delivery %s round %d, want b round 0", env.ID, env.Round)
	}
	res, err := d.(backend.AwaitedDelivery).Awaited(ctx)
	if err != nil || len(res) != 1 || res[0].ID != "a" || res[0].State != backend.JobSucceeded || string(res[0].Output) != "from a" {
		t.Fatalf("b's awaited results: %+v, %v", res, err)
	}
	// b now waits for a child of its own.
	rig.Must(t, d.(backend.WaitingDelivery).WaitWith(ctx,
		[]backend.Publication{{Envelope: backend.Envelope{ID: "c", Queue: "q"}}},
		backend.Await{IDs: []string{"c"}}, nil))
	d = next(t, s)
	if env, _ = d.Envelope(); env.ID != "c" {
		t.Fatalf("third delivery %s, want c", env.ID)
	}
	rig.Must(t, d.DeadLetter(ctx, "c broke"))
	s.Drop()
	rig.Must(t, b.Close(ctx))

	// The release may or may not have landed before Close: either way b comes back.
	b = openMem(t, fs, Config{})
	defer b.Close(ctx)
	s, err = b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 4})
	rig.Must(t, err)
	d = next(t, s)
	env, _ = d.Envelope()
	if env.ID != "b" || env.Round != 1 {
		t.Fatalf("after the restart: %s round %d, want b round 1", env.ID, env.Round)
	}
	res, err = d.(backend.AwaitedDelivery).Awaited(ctx)
	if err != nil || len(res) != 1 || res[0].ID != "c" || res[0].State != backend.JobDead || res[0].Reason != "c broke" {
		t.Fatalf("b's second round results: %+v, %v", res, err)
	}
	rig.Must(t, d.Ack(ctx))
	if got, _ := b.awaited(ctx, "b"); len(got) != 0 {
		t.Fatalf("results kept after b's final settle: %+v", got)
	}
	s.Drop()
}

// A dependent whose awaited job is cancelled is cancelled with it (OnFailureCancel),
// and so is the one that awaits it; an await of an unknown job stores nothing.
func TestCancelledDependencyCancelsTheChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openMem(t, nil, Config{})
	defer b.Close(ctx)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "a", Queue: "q"}, Delay: time.Hour}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "b", Queue: "q"}}, Await: backend.Await{IDs: []string{"a"}}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "c", Queue: "q"}}, Await: backend.Await{IDs: []string{"b"}}},
	}))
	rig.Must(t, b.CancelJob(ctx, "a"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := b.JobRecord(ctx, "c")
		rig.Must(t, err)
		if rec.State == backend.JobCancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c is %s, want cancelled after a was", rec.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	err := b.PublishDependents(ctx, []backend.Dependent{
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "d", Queue: "q"}}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "e", Queue: "q"}}, Await: backend.Await{IDs: []string{"nobody"}}},
	})
	if !errors.Is(err, backend.ErrUnknownAwait) {
		t.Fatalf("await of an unknown job: %v, want ErrUnknownAwait", err)
	}
	if _, err := b.JobRecord(ctx, "d"); err == nil {
		t.Fatal("d was stored by a call that failed")
	}
}
