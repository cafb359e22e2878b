package pebble

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
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
		dep("a", 0),
		dep("b", 0, "a"),
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
	b := withQueue(t)
	defer b.Close(ctx)
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{
		dep("a", time.Hour),
		dep("b", 0, "a"),
		dep("c", 0, "b"),
	}))
	rig.Must(t, b.CancelJob(ctx, "a"))
	eventuallyState(t, b, "c", backend.JobCancelled)
	err := b.PublishDependents(ctx, []backend.Dependent{
		dep("d", 0),
		dep("e", 0, "nobody"),
	})
	if !errors.Is(err, backend.ErrUnknownAwait) {
		t.Fatalf("await of an unknown job: %v, want ErrUnknownAwait", err)
	}
	if _, err := b.JobRecord(ctx, "d"); err == nil {
		t.Fatal("d was stored by a call that failed")
	}
}

// A batch's on_success callback waits for every job; a dead one cancels it while
// on_complete runs; the group reads failed, and a running group can be cancelled.
func TestBatchGroupState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withQueue(t)
	defer b.Close(ctx)
	ids := []string{backend.NewID(), backend.NewID()}
	all := backend.Await{IDs: ids}
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupBatch, Members: []backend.GroupMember{
		{ID: ids[0], Queue: "q"}, {ID: ids[1], Queue: "q"},
		{ID: "done", Queue: "q", Role: backend.RoleOnComplete}, {ID: "ok", Queue: "q", Role: backend.RoleOnSuccess},
	}}
	rig.Must(t, b.PublishGroup(ctx, g, []backend.Dependent{
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: ids[0], Queue: "q"}}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: ids[1], Queue: "q"}}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "done", Queue: "q"}}, Await: backend.Await{IDs: ids, OnFailure: backend.OnFailureRun}},
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "ok", Queue: "q"}}, Await: all},
	}))
	got, err := b.Group(ctx, g.ID)
	if err != nil || got.State != backend.GroupRunning || got.Members[3].State != backend.JobWaiting {
		t.Fatalf("new batch: %+v, %v", got, err)
	}
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 1})
	rig.Must(t, err)
	defer s.Drop()
	d := next(t, s)
	rig.Must(t, d.Ack(ctx))
	d = next(t, s)
	rig.Must(t, d.DeadLetter(ctx, "no"))
	d = next(t, s)
	if env, _ := d.Envelope(); env.ID != "done" {
		t.Fatalf("after both ended: %s, want the on_complete callback", env.ID)
	}
	res, err := d.(backend.AwaitedDelivery).Awaited(ctx)
	if err != nil || len(res) != 2 || res[1].State != backend.JobDead {
		t.Fatalf("on_complete reads %+v, %v", res, err)
	}
	rig.Must(t, d.Ack(ctx))
	eventuallyState(t, b, "ok", backend.JobCancelled)
	got, err = b.Group(ctx, g.ID)
	if err != nil || got.State != backend.GroupFailed {
		t.Fatalf("batch after a dead job: %s, %v; want failed", got.State, err)
	}
	if _, err := b.CancelGroup(ctx, g.ID, ""); !errors.Is(err, backend.ErrJobState) {
		t.Fatalf("cancel of an ended batch: %v, want ErrJobState", err)
	}
	page, err := b.ListGroups(ctx, backend.GroupBatch, "", 0)
	if err != nil || len(page.Groups) != 1 || page.Groups[0].ID != g.ID {
		t.Fatalf("ListGroups: %+v, %v", page, err)
	}
}

// eventuallyState waits up to 5 s for the record of id to say state: releases and
// cancels of waiting jobs are writes of their own, after the write that caused them.
func eventuallyState(t *testing.T, b *Backend, id string, state backend.JobState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := b.JobRecord(context.Background(), id)
		if err == nil && rec.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s (%v), want %s", id, rec.State, err, state)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A cancelling dependent whose first awaited job failed before a crash (its result on
// disk, its cancel not yet) is cancelled at Open, though another it awaits still waits.
func TestFailedAwaitBeforeACrashCancelsAtOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := vfs.NewMem()
	b := openMem(t, fs, Config{})
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{
		dep("a", time.Hour),
		dep("b", time.Hour),
		dep("d", 0, "a", "b"),
	}))
	rig.Must(t, b.Close(ctx))
	db, err := pebbledb.Open("/data", &pebbledb.Options{FS: fs})
	rig.Must(t, err)
	rig.Must(t, db.Set(awaitedKey("d", 0), encodeResult(resultOf("a", "q", backend.JobDead, "broke", nil, false)), pebbledb.Sync))
	rig.Must(t, db.Close())
	b = openMem(t, fs, Config{})
	defer b.Close(ctx)
	eventuallyState(t, b, "d", backend.JobCancelled)
	if n := b.waitingCount("q"); n != 0 {
		t.Fatalf("%d waiting after d was cancelled", n)
	}
}

// CancelWaiting of an unknown job is ErrNotFound; with cascade it goes through a
// waiting job to what that one awaits.
func TestCancelWaitingCascadesThroughWaitingJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withQueue(t)
	defer b.Close(ctx)
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{
		dep("a", time.Hour),
		dep("p", 0, "a"),
		dep("top", 0, "p"),
	}))
	if _, _, err := b.CancelWaiting(ctx, "nobody", "", false); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("CancelWaiting of an unknown job: %v, want ErrNotFound", err)
	}
	if _, _, err := b.CancelWaiting(ctx, "a", "", false); !errors.Is(err, backend.ErrJobState) {
		t.Fatalf("CancelWaiting of a delayed job: %v, want ErrJobState", err)
	}
	cancelled, running, err := b.CancelWaiting(ctx, "top", "", true)
	if err != nil || len(running) != 0 || fmt.Sprint(cancelled) != "[top p a]" {
		t.Fatalf("cascading CancelWaiting(top) = %v, %v, %v; want [top p a]", cancelled, running, err)
	}
	for _, id := range []string{"top", "p", "a"} {
		eventuallyState(t, b, id, backend.JobCancelled)
	}
}

// CancelGroup while a member's release is being written cancels it once it is on its
// queue (where no consumer is): it never runs, and is not reported running.
func TestCancelGroupDuringARelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withQueue(t)
	defer b.Close(ctx)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "r"}))
	entered, unblock := holdCommit(b, "release waiting job")
	g := backend.GroupRecord{ID: "g", Kind: backend.GroupWorkflow, Members: []backend.GroupMember{{ID: "j", Queue: "q", Name: "j"}, {ID: "cb", Queue: "r", Name: "cb", DependsOn: []string{"j"}}}}
	rig.Must(t, b.PublishGroup(ctx, g, []backend.Dependent{
		dep("j", 0),
		{Publication: backend.Publication{Envelope: backend.Envelope{ID: "cb", Queue: "r"}}, Await: backend.Await{IDs: []string{"j"}, OnFailure: backend.OnFailureRun}},
	}))
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 4})
	rig.Must(t, err)
	defer s.Drop()
	rig.Must(t, next(t, s).Ack(ctx))
	<-entered
	type answer struct {
		running []string
		err     error
	}
	cancelled := make(chan answer, 1)
	go func() {
		running, err := b.CancelGroup(ctx, "g", "")
		cancelled <- answer{running, err}
	}()
	time.Sleep(20 * time.Millisecond) // CancelGroup meets the release under way
	close(unblock)
	if a := <-cancelled; a.err != nil || len(a.running) != 0 {
		t.Fatalf("CancelGroup = %v, %v; want nothing running", a.running, a.err)
	}
	eventuallyState(t, b, "cb", backend.JobCancelled)
}

// A dependent published while the job it awaits is settling (its end staged, its write
// not landed) is not released on that settle until it has landed, and then reads it.
func TestDependentWaitsForTheAwaitedSettleToLand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := withQueue(t)
	defer b.Close(ctx)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "r"}))
	entered, unblock := holdCommit(b, "ack")
	rig.Must(t, b.Publish(ctx, backend.Envelope{ID: "a", Queue: "q"}, 0))
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 4})
	rig.Must(t, err)
	defer s.Drop()
	d := next(t, s)
	done := make(chan error, 1)
	go func() {
		done <- d.(backend.AtomicDelivery).AckWith(ctx, nil, &backend.JobRecord{Output: []byte("out")})
	}()
	<-entered
	rig.Must(t, b.PublishDependents(ctx, []backend.Dependent{{Publication: backend.Publication{Envelope: backend.Envelope{ID: "dep", Queue: "r"}}, Await: backend.Await{IDs: []string{"a"}}}}))
	sr, err := b.Consume(ctx, backend.QueueConfig{Name: "r", Prefetch: 4})
	rig.Must(t, err)
	defer sr.Drop()
	select {
	case dd := <-sr.Deliveries():
		env, _ := dd.Envelope()
		t.Fatalf("%s delivered while the ack of what it awaits had not landed", env.ID)
	case <-time.After(50 * time.Millisecond):
	}
	close(unblock)
	rig.Must(t, <-done)
	dd := next(t, sr)
	res, err := dd.(backend.AwaitedDelivery).Awaited(ctx)
	if err != nil || len(res) != 1 || res[0].State != backend.JobSucceeded || string(res[0].Output) != "out" {
		t.Fatalf("dep reads %+v, %v; want a succeeded with its output", res, err)
	}
}

// holdCommit makes the first commit of op wait, once it has closed entered, until the
// caller closes unblock.
func holdCommit(b *Backend, op string) (entered, unblock chan struct{}) {
	entered, unblock = make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.beforeCommit = func(o string) {
		if o == op {
			once.Do(func() { close(entered); <-unblock })
		}
	}
	return entered, unblock
}

// A group is kept as long as one of its jobs' records is: once retention has pruned
// every member's record, the prune round deletes the group too.
func TestGroupsArePrunedWithTheirRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openMem(t, nil, Config{Records: RecordConfig{MaxCount: 1, PruneInterval: time.Hour}})
	defer b.Close(ctx)
	rig.Must(t, b.Declare(ctx, backend.QueueConfig{Name: "q"}))
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupBatch, Members: []backend.GroupMember{{ID: "a", Queue: "q"}, {ID: "b", Queue: "q"}}}
	rig.Must(t, b.PublishGroup(ctx, g, []backend.Dependent{
		dep("a", 0),
		dep("b", 0),
	}))
	s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 1})
	rig.Must(t, err)
	defer s.Drop()
	rig.Must(t, next(t, s).Ack(ctx))
	rig.Must(t, b.pruneGroups(ctx))
	if _, err := b.Group(ctx, g.ID); err != nil {
		t.Fatalf("a group with a job still held was pruned: %v", err)
	}
	rig.Must(t, next(t, s).Ack(ctx))
	rig.Must(t, b.prune(time.Now())) // keeps one record of the two
	rig.Must(t, b.pruneGroups(ctx))
	if _, err := b.Group(ctx, g.ID); err != nil {
		t.Fatalf("a group with one record kept was pruned: %v", err)
	}
	for _, id := range []string{"a", "b"} { // the one record the prune kept, as a later prune would
		if err := b.deleteFinished(ctx, id); err != nil && !errors.Is(err, backend.ErrNotFound) {
			t.Fatal(err)
		}
	}
	rig.Must(t, b.pruneGroups(ctx))
	if _, err := b.Group(ctx, g.ID); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("a group whose jobs' records are all gone: %v, want ErrNotFound", err)
	}
}

// withQueue is openMem on a fresh memory filesystem with the queue "q" declared.
func withQueue(t *testing.T) *Backend {
	t.Helper()
	b := openMem(t, nil, Config{})
	rig.Must(t, b.Declare(context.Background(), backend.QueueConfig{Name: "q"}))
	return b
}

// dep is a dependent job id on the queue "q", after delay, awaiting awaits (none: a
// plain publication).
func dep(id string, delay time.Duration, awaits ...string) backend.Dependent {
	d := backend.Dependent{Publication: backend.Publication{Envelope: backend.Envelope{ID: id, Queue: "q"}, Delay: delay}}
	if len(awaits) > 0 {
		d.Await = backend.Await{IDs: awaits}
	}
	return d
}
