package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Rules of jobs that wait for other jobs (backend.DependentPublisher,
// backend.WaitingDelivery, backend.AwaitedDelivery, backend.WaitCanceller,
// backend.GroupStore), written from the contract in the backend package: each runs
// only on a backend that implements the interface it checks.

// dependent returns a Dependent of env that awaits ids with onFailure.
func dependent(env backend.Envelope, onFailure backend.OnFailure, ids ...string) backend.Dependent {
	return backend.Dependent{Publication: backend.Publication{Envelope: env}, Await: backend.Await{IDs: ids, OnFailure: onFailure}}
}

// plain returns a Dependent of env that awaits nothing.
func plain(env backend.Envelope) backend.Dependent {
	return backend.Dependent{Publication: backend.Publication{Envelope: env}}
}

func (h *harness) publishDependents(t *testing.T, dp backend.DependentPublisher, deps ...backend.Dependent) {
	t.Helper()
	if err := dp.PublishDependents(h.ctx(), deps); err != nil {
		t.Fatalf("PublishDependents: %v", err)
	}
}

// ackOutput acknowledges d with a record whose output is out: what an awaited job
// leaves its waiters.
func ackOutput(t *testing.T, h *harness, d backend.Delivery, out string) {
	t.Helper()
	ad, ok := d.(backend.AtomicDelivery)
	if !ok {
		t.Fatalf("%T: a backend with waiting jobs must have atomic deliveries, to take the output of an awaited job", d)
	}
	mustSettle(t, "AckWith", ad.AckWith(h.ctx(), nil, &backend.JobRecord{Output: []byte(out)}))
}

// awaited returns what the delivered job d awaited.
func (h *harness) awaited(t *testing.T, d backend.Delivery) []backend.AwaitResult {
	t.Helper()
	ad, ok := d.(backend.AwaitedDelivery)
	if !ok {
		t.Fatalf("%T does not implement backend.AwaitedDelivery, on a backend with waiting jobs", d)
	}
	res, err := ad.Awaited(h.ctx())
	if err != nil {
		t.Fatalf("Awaited: %v", err)
	}
	return res
}

// result is what a rule expects of one AwaitResult; output is compared only when set.
type result struct {
	id, queue string
	state     backend.JobState
	reason    string // a substring of the Reason; empty wants none
	output    string
}

// expectAwaited fails unless got matches want, in order.
func expectAwaited(t *testing.T, got []backend.AwaitResult, want ...result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("Awaited gave %d results %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		okReason := (w.reason == "" && g.Reason == "") || (w.reason != "" && strings.Contains(g.Reason, w.reason))
		if g.ID != w.id || g.Queue != w.queue || g.State != w.state || !okReason || (w.output != "" && string(g.Output) != w.output) {
			t.Fatalf("Awaited[%d] = {%s %s %s %q %q}, want {%s %s %s reason with %q output %q}", i, g.ID, g.Queue, g.State, g.Reason, g.Output, w.id, w.queue, w.state, w.reason, w.output)
		}
	}
}

// testDependentsWaitForEveryAwaited: a dependent is held waiting, counted as Waiting
// on the queue it will run on, until every job it awaits ended; then it is delivered
// once, with its Round as published, and Awaited gives the awaited jobs' results in
// the order it awaited them, outputs cut to MaxAwaitOutput.
func testDependentsWaitForEveryAwaited(t *testing.T, h *harness) {
	dp := implements[backend.DependentPublisher](t, h)
	work := h.declare(t, 8, 0)
	after := h.declare(t, 2, 0)
	a, b := job(work, "a"), job(work, "b")
	h.publish(t, a, 0)
	dep := job(after, "dep")
	// b is published by the same call, before the dependent that awaits it; the
	// dependent awaits b first.
	h.publishDependents(t, dp, plain(b), dependent(dep, "", b.ID, a.ID))
	if st := h.stats(t, after); st.Waiting != 1 || st.Pending != 0 {
		t.Fatalf("stats of the dependent's queue %+v, want 1 waiting, none pending", st)
	}
	if st := h.stats(t, work); st.Waiting != 0 || st.Pending != 2 {
		t.Fatalf("stats of the awaited jobs' queue %+v, want 2 pending, none waiting", st)
	}
	sa := h.consume(t, after)
	sw := h.consume(t, work)
	da, _ := h.receiveNamed(t, sw, "a")
	db, _ := h.receiveNamed(t, sw, "b")
	ackOutput(t, h, da, "out of a")
	h.expectNothing(t, after, sa) // b has not ended
	long := strings.Repeat("x", backend.MaxAwaitOutput+100)
	ackOutput(t, h, db, long)
	d, env := h.receiveNamed(t, sa, "dep")
	if env.ID != dep.ID || env.Round != 0 || env.Attempt != 1 {
		t.Fatalf("dependent delivered as %s round %d attempt %d, want %s round 0 attempt 1", env.ID, env.Round, env.Attempt, dep.ID)
	}
	res := h.awaited(t, d)
	expectAwaited(t, res,
		result{id: b.ID, queue: work.Name, state: backend.JobSucceeded},
		result{id: a.ID, queue: work.Name, state: backend.JobSucceeded, output: "out of a"})
	if len(res[0].Output) != backend.MaxAwaitOutput || !res[0].OutputTruncated || !bytes.Equal(res[0].Output, []byte(long[:backend.MaxAwaitOutput])) {
		t.Fatalf("b's output of %d bytes came back as %d bytes, truncated %v; want the first %d and truncated", len(long), len(res[0].Output), res[0].OutputTruncated, backend.MaxAwaitOutput)
	}
	if res[1].OutputTruncated {
		t.Fatal("a's short output is marked truncated")
	}
	if st := h.stats(t, after); st.Waiting != 0 {
		t.Fatalf("stats %+v once the dependent was delivered, want none waiting", st)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, after, sa) // delivered once
}

// testDependentsOnFailure: an awaited job dead-lettered or cancelled cancels an
// OnFailureCancel dependent (never delivered), whose own dependents see it cancelled,
// with a reason; an OnFailureRun dependent runs anyway and reads why.
func testDependentsOnFailure(t *testing.T, h *harness) {
	dp := implements[backend.DependentPublisher](t, h)
	work := h.declare(t, 8, 0)
	after := h.declare(t, 8, 0)
	x, y := job(work, "x"), job(work, "y")
	b, c, sees, r, e := job(after, "b"), job(after, "c"), job(after, "sees b"), job(after, "runs"), job(after, "e")
	h.publishDependents(t, dp, plain(x), plain(y),
		dependent(b, backend.OnFailureCancel, x.ID),
		dependent(c, "", b.ID), // the default: cancel
		dependent(sees, backend.OnFailureRun, b.ID),
		dependent(r, backend.OnFailureRun, x.ID),
		dependent(e, backend.OnFailureCancel, y.ID))
	sw := h.consume(t, work)
	dx, _ := h.receiveNamed(t, sw, "x")
	mustSettle(t, "DeadLetter", dx.DeadLetter(h.ctx(), "boom"))
	dy, _ := h.receiveNamed(t, sw, "y")
	if cd, ok := dy.(backend.CancellableDelivery); ok {
		mustSettle(t, "Cancel", cd.Cancel(h.ctx(), "stopped", nil))
	} else {
		mustSettle(t, "DeadLetter", dy.DeadLetter(h.ctx(), "stopped"))
	}
	// A dependent that awaits a job that died already is cancelled at once, though
	// it awaits another that has not ended.
	z, late := job(work, "z"), job(after, "late")
	h.publishDependents(t, dp, plain(z), dependent(late, "", z.ID, x.ID))
	// late waits for nothing; the others are released or cancelled once what they
	// await ended (a backend may take a write of its own for that, after the settle).
	h.waitStats(t, after, "dependent left waiting (late is cancelled at once, the others once x and y ended)", func(st backend.QueueStats) bool { return st.Waiting == 0 })
	sa := h.consume(t, after)
	got := make(map[string][]backend.AwaitResult)
	for range 2 {
		d, env := h.receive(t, sa)
		got[string(env.Payload)] = h.awaited(t, d)
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	h.expectNothing(t, after, sa) // b, c, e and late were cancelled
	if got["runs"] == nil || got["sees b"] == nil {
		t.Fatalf("delivered %v, want the two OnFailureRun dependents", slices.Collect(func(yield func(string) bool) {
			for k := range got {
				yield(k)
			}
		}))
	}
	expectAwaited(t, got["runs"], result{id: x.ID, queue: work.Name, state: backend.JobDead, reason: "boom"})
	res := got["sees b"]
	expectAwaited(t, res, result{id: b.ID, queue: after.Name, state: backend.JobCancelled, reason: x.ID})
	if st := h.stats(t, after); st.Waiting != 0 {
		t.Fatalf("stats %+v, want none waiting once every dependent was delivered or cancelled", st)
	}
	if rr, ok := h.b.(backend.JobRecordReader); ok {
		for _, id := range []string{b.ID, c.ID, e.ID, late.ID} {
			rec, err := rr.JobRecord(h.ctx(), id)
			if err != nil || rec.State != backend.JobCancelled || rec.Reason == "" {
				t.Errorf("record of a cancelled dependent %s = %+v, %v; want cancelled with a reason", id, rec, err)
			}
		}
	}
}

// testUnknownAwait: an await of a job neither earlier in the call nor known fails the
// whole call with ErrUnknownAwait naming it, and stores nothing; an await of a job that
// ended, and that the backend has a record of, counts as ended at once. WaitWith checks
// its await the same way and leaves the delivery unsettled.
func testUnknownAwait(t *testing.T, h *harness) {
	dp := implements[backend.DependentPublisher](t, h)
	q := h.declare(t, 4, 0)
	a, dep := job(q, "a"), job(q, "dep")
	err := dp.PublishDependents(h.ctx(), []backend.Dependent{plain(a), dependent(dep, "", a.ID, "no-such-job")})
	if !errors.Is(err, backend.ErrUnknownAwait) || !strings.Contains(err.Error(), "no-such-job") {
		t.Fatalf("PublishDependents awaiting an unknown job: %v, want ErrUnknownAwait naming it", err)
	}
	// An await of a job later in the call is no better: that is how a cycle is refused.
	err = dp.PublishDependents(h.ctx(), []backend.Dependent{dependent(dep, "", a.ID), plain(a)})
	if !errors.Is(err, backend.ErrUnknownAwait) {
		t.Fatalf("PublishDependents awaiting a job later in the call: %v, want ErrUnknownAwait", err)
	}
	if st := h.stats(t, q); st.Pending != 0 || st.Waiting != 0 || st.Delayed != 0 {
		t.Fatalf("stats %+v after failed calls, want nothing stored", st)
	}
	s := h.consume(t, q)
	h.expectNothing(t, q, s)

	done := job(q, "done")
	h.publish(t, done, 0)
	d, _ := h.receiveNamed(t, s, "done")
	ackOutput(t, h, d, "finished")
	late := job(q, "late")
	h.publishDependents(t, dp, dependent(late, "", done.ID))
	d, _ = h.receiveNamed(t, s, "late")
	expectAwaited(t, h.awaited(t, d), result{id: done.ID, queue: q.Name, state: backend.JobSucceeded, output: "finished"})
	mustSettle(t, "Ack", d.Ack(h.ctx()))

	parent := job(q, "parent")
	h.publish(t, parent, 0)
	d, _ = h.receiveNamed(t, s, "parent")
	wd, ok := d.(backend.WaitingDelivery)
	if !ok {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
		return
	}
	child := job(q, "child")
	err = wd.WaitWith(h.ctx(), []backend.Publication{{Envelope: child}}, backend.Await{IDs: []string{child.ID, "no-such-child"}}, nil)
	if !errors.Is(err, backend.ErrUnknownAwait) || !strings.Contains(err.Error(), "no-such-child") {
		t.Fatalf("WaitWith awaiting an unknown job: %v, want ErrUnknownAwait naming it", err)
	}
	mustSettle(t, "Ack after a failed WaitWith", d.Ack(h.ctx())) // it stayed unsettled
	h.expectNothing(t, q, s)                                     // and its child was not published
}

// testWaitWith: a delivery settled as waiting publishes its children with the settle
// and holds no claim (the stream, at prefetch 1, hands out other jobs meanwhile); once
// every awaited child ended it comes back at the same attempt with Round one higher,
// reading the children's results, again after a retry; a second wait works, and its
// results replace the first's.
func testWaitWith(t *testing.T, h *harness) {
	implements[backend.DependentPublisher](t, h)
	parents := h.declare(t, 1, 0)
	kids := h.declare(t, 8, 0)
	p, other := job(parents, "parent"), job(parents, "other")
	h.publish(t, p, 0)
	h.publish(t, other, 0)
	sp := h.consume(t, parents)
	d, env := h.receiveNamed(t, sp, "parent")
	wd, ok := d.(backend.WaitingDelivery)
	if !ok {
		t.Fatalf("%T implements backend.DependentPublisher but its deliveries not backend.WaitingDelivery", h.b)
	}
	c1, c2 := job(kids, "c1"), job(kids, "c2")
	mustSettle(t, "WaitWith", wd.WaitWith(h.ctx(), []backend.Publication{{Envelope: c1}, {Envelope: c2}}, backend.Await{IDs: []string{c1.ID, c2.ID}}, nil))
	if err := d.Ack(h.ctx()); !errors.Is(err, backend.ErrAlreadySettled) {
		t.Fatalf("Ack after WaitWith: %v, want ErrAlreadySettled", err)
	}
	if st := h.stats(t, parents); st.Waiting != 1 || st.Unacked != 0 {
		t.Fatalf("stats %+v of a waiting parent's queue, want 1 waiting and none unacked", st)
	}
	h.ackNext(t, sp, "other") // the waiting parent holds no slot of the prefetch
	sk := h.consume(t, kids)
	d1, _ := h.receiveNamed(t, sk, "c1")
	d2, _ := h.receiveNamed(t, sk, "c2")
	ackOutput(t, h, d1, "one")
	h.expectNothing(t, parents, sp)
	mustSettle(t, "DeadLetter", d2.DeadLetter(h.ctx(), "bad"))
	d, env1 := h.receiveNamed(t, sp, "parent")
	if env1.ID != env.ID || env1.Attempt != env.Attempt || env1.Round != env.Round+1 {
		t.Fatalf("resumed parent %s attempt %d round %d, want %s attempt %d round %d", env1.ID, env1.Attempt, env1.Round, env.ID, env.Attempt, env.Round+1)
	}
	expectAwaited(t, h.awaited(t, d),
		result{id: c1.ID, queue: kids.Name, state: backend.JobSucceeded, output: "one"},
		result{id: c2.ID, queue: kids.Name, state: backend.JobDead, reason: "bad"})

	wd = d.(backend.WaitingDelivery)
	c3 := job(kids, "c3")
	mustSettle(t, "second WaitWith", wd.WaitWith(h.ctx(), []backend.Publication{{Envelope: c3}}, backend.Await{IDs: []string{c3.ID}}, nil))
	d3, _ := h.receiveNamed(t, sk, "c3")
	ackOutput(t, h, d3, "three")
	d, env2 := h.receiveNamed(t, sp, "parent")
	if env2.Round != env.Round+2 || env2.Attempt != env.Attempt {
		t.Fatalf("parent resumed after its second wait at round %d attempt %d, want round %d attempt %d", env2.Round, env2.Attempt, env.Round+2, env.Attempt)
	}
	want := result{id: c3.ID, queue: kids.Name, state: backend.JobSucceeded, output: "three"}
	expectAwaited(t, h.awaited(t, d), want)
	next := env2
	next.Attempt++
	mustSettle(t, "Retry", d.Retry(h.ctx(), next, 0))
	d, _ = h.receiveNamed(t, sp, "parent")
	expectAwaited(t, h.awaited(t, d), want) // kept with the job until it ends
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	if st := h.stats(t, parents); st.Waiting != 0 {
		t.Fatalf("stats %+v after the parent ended, want none waiting", st)
	}
	h.expectNothing(t, parents, sp)
}

// testWaitTimeout: once its Await.Timeout passed, a waiting job runs, whatever its
// OnFailure, with the jobs that had not ended marked JobUnfinished; never before.
func testWaitTimeout(t *testing.T, h *harness) {
	dp := implements[backend.DependentPublisher](t, h)
	q := h.declare(t, 4, 0)
	kids := h.declare(t, 4, 0)
	k1, k2, dep := job(kids, "k1"), job(kids, "k2"), job(q, "dep")
	const timeout = 2 * time.Second // k1 is published, taken and acked well within it, even on a loaded machine
	start := time.Now()
	h.publishDependents(t, dp, plain(k1), plain(k2), backend.Dependent{
		Publication: backend.Publication{Envelope: dep},
		Await:       backend.Await{IDs: []string{k1.ID, k2.ID}, Timeout: timeout},
	})
	sk := h.consume(t, kids)
	d1, _ := h.receiveNamed(t, sk, "k1")
	ackOutput(t, h, d1, "one")
	d2, _ := h.receiveNamed(t, sk, "k2") // running past the timeout
	s := h.consume(t, q)
	d, _ := h.receiveNamed(t, s, "dep")
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("dependent ran after %v, before its timeout of %v", waited, timeout)
	}
	expectAwaited(t, h.awaited(t, d),
		result{id: k1.ID, queue: kids.Name, state: backend.JobSucceeded, output: "one"},
		result{id: k2.ID, queue: kids.Name, state: backend.JobUnfinished})
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	mustSettle(t, "Ack of the late job", d2.Ack(h.ctx()))
	h.expectNothing(t, q, s) // the late end does not run it again
}

// testCancelWaiting: CancelWaiting cancels a waiting job (never delivered again);
// with cascade it cancels the awaited jobs that have not ended too and reports the
// running ones, which still settle; a job that is not waiting is ErrJobState.
func testCancelWaiting(t *testing.T, h *harness) {
	implements[backend.DependentPublisher](t, h)
	wc := implements[backend.WaitCanceller](t, h)
	q := h.declare(t, 4, 0)
	kids := h.declare(t, 8, 0)
	p1, p2 := job(q, "p1"), job(q, "p2")
	for _, p := range []backend.Envelope{p1, p2} {
		h.publish(t, p, 0)
	}
	s := h.consume(t, q)
	wait := func(name string, children ...backend.Publication) {
		t.Helper()
		d, _ := h.receiveNamed(t, s, name)
		var ids []string
		for _, c := range children {
			ids = append(ids, c.Envelope.ID)
		}
		mustSettle(t, "WaitWith", d.(backend.WaitingDelivery).WaitWith(h.ctx(), children, backend.Await{IDs: ids}, nil))
	}
	a1 := job(kids, "a1")
	wait("p1", backend.Publication{Envelope: a1})
	cancelled, running, err := wc.CancelWaiting(h.ctx(), p1.ID, "stop", false)
	if err != nil || !slices.Equal(cancelled, []string{p1.ID}) || len(running) != 0 {
		t.Fatalf("CancelWaiting without cascade = %v, %v, %v; want [%s] and nothing running", cancelled, running, err, p1.ID)
	}
	if _, _, err := wc.CancelWaiting(h.ctx(), p1.ID, "again", false); !errors.Is(err, backend.ErrJobState) {
		t.Fatalf("CancelWaiting of a cancelled job: %v, want ErrJobState", err)
	}
	if st := h.stats(t, kids); st.Pending != 1 {
		t.Fatalf("stats %+v of the children, want a1 pending still: no cascade", st)
	}
	b1, b2, b3 := job(kids, "b1"), job(kids, "b2"), job(kids, "b3")
	// b3 is delayed, so that no stream has taken it when the cascade comes.
	wait("p2", backend.Publication{Envelope: b1}, backend.Publication{Envelope: b2}, backend.Publication{Envelope: b3, Delay: time.Hour})
	sk := h.consume(t, kids)
	h.ackNext(t, sk, "a1")
	db1, _ := h.receiveNamed(t, sk, "b1")
	h.ackNext(t, sk, "b2")
	cancelled, running, err = wc.CancelWaiting(h.ctx(), p2.ID, "stop all", true)
	slices.Sort(cancelled)
	want := []string{p2.ID, b3.ID}
	slices.Sort(want)
	if err != nil || !slices.Equal(cancelled, want) || !slices.Equal(running, []string{b1.ID}) {
		t.Fatalf("CancelWaiting with cascade = %v, %v, %v; want cancelled %v and running [%s]", cancelled, running, err, want, b1.ID)
	}
	mustSettle(t, "Ack of the running child", db1.Ack(h.ctx()))
	if st := h.stats(t, kids); st.Delayed != 0 || st.Pending != 0 {
		t.Fatalf("stats %+v of the children after the cascade, want b3 gone", st)
	}
	if st := h.stats(t, q); st.Waiting != 0 {
		t.Fatalf("stats %+v after the cancels, want none waiting", st)
	}
	h.expectNothing(t, q, s)
	other := job(q, "pending")
	h.publish(t, other, time.Hour)
	if _, _, err := wc.CancelWaiting(h.ctx(), other.ID, "not waiting", true); !errors.Is(err, backend.ErrJobState) {
		t.Fatalf("CancelWaiting of a delayed job: %v, want ErrJobState", err)
	}
}

// memberStates maps a group's members to their states, by name, or by role, or by
// payload-free id for a batch's jobs.
func memberStates(g backend.GroupRecord) map[string]backend.JobState {
	out := make(map[string]backend.JobState)
	for _, m := range g.Members {
		k := m.Name
		if k == "" {
			k = m.Role
		}
		if k == "" {
			k = m.ID
		}
		out[k] = m.State
	}
	return out
}

func (h *harness) group(t *testing.T, gs backend.GroupStore, id string) backend.GroupRecord {
	t.Helper()
	g, err := gs.Group(h.ctx(), id)
	if err != nil {
		t.Fatalf("Group(%s): %v", id, err)
	}
	return g
}

// groupOnceEnded polls the group id until it has ended, for up to the harness's
// timeout: what a member's end does to the jobs that await it (a cancel, a release)
// a backend may write after the member's settle. It returns the group, ended or not.
func (h *harness) groupOnceEnded(t *testing.T, gs backend.GroupStore, id string) backend.GroupRecord {
	t.Helper()
	deadline := time.Now().Add(h.o.Timeout)
	for {
		g := h.group(t, gs, id)
		ended := g.State != backend.GroupRunning
		for _, m := range g.Members {
			ended = ended && m.State.Finished()
		}
		if ended || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workflow builds a workflow of tasks on q: each task named by its first entry, the
// rest the tasks it depends on (earlier ones), with onFailure.
func workflow(q backend.QueueConfig, onFailure backend.OnFailure, tasks ...[]string) (backend.GroupRecord, []backend.Dependent) {
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupWorkflow}
	ids := make(map[string]string)
	var deps []backend.Dependent
	for _, task := range tasks {
		env := job(q, task[0])
		ids[task[0]] = env.ID
		var await []string
		for _, d := range task[1:] {
			await = append(await, ids[d])
		}
		g.Members = append(g.Members, backend.GroupMember{Name: task[0], ID: env.ID, Queue: q.Name, DependsOn: task[1:]})
		deps = append(deps, dependent(env, onFailure, await...))
	}
	return g, deps
}

// testGroupsWorkflowAndBatch: a workflow and a batch are kept with their members and
// live states; a workflow whose tasks all succeed is succeeded, one with a dead task
// failed with its dependent cancelled; a batch's callbacks are members with a role,
// on_complete run and on_success cancelled when a job died; an unknown group is
// ErrNotFound, and members that disagree with their jobs store nothing.
func testGroupsWorkflowAndBatch(t *testing.T, h *harness) {
	gs := implements[backend.GroupStore](t, h)
	q := h.declare(t, 8, 0)
	g, deps := workflow(q, "", []string{"fetch"}, []string{"render", "fetch"})
	mustSettle(t, "PublishGroup", gs.PublishGroup(h.ctx(), g, deps))
	got := h.group(t, gs, g.ID)
	if got.ID != g.ID || got.Kind != backend.GroupWorkflow || got.State != backend.GroupRunning || len(got.Members) != 2 {
		t.Fatalf("Group = %+v, want the running workflow with two members", got)
	}
	if st := memberStates(got); st["fetch"] != backend.JobPending || st["render"] != backend.JobWaiting {
		t.Fatalf("member states %v, want fetch pending, render waiting", st)
	}
	if m := got.Members[1]; m.Name != "render" || m.ID != g.Members[1].ID || m.Queue != q.Name || !slices.Equal(m.DependsOn, []string{"fetch"}) {
		t.Fatalf("member %+v, want render depending on fetch", m)
	}
	s := h.consume(t, q)
	d, _ := h.receiveNamed(t, s, "fetch")
	if st := memberStates(h.group(t, gs, g.ID)); st["fetch"] != backend.JobRunning {
		t.Fatalf("member states %v while fetch runs, want it running", st)
	}
	ackOutput(t, h, d, "fetched")
	d, _ = h.receiveNamed(t, s, "render")
	expectAwaited(t, h.awaited(t, d), result{id: g.Members[0].ID, queue: q.Name, state: backend.JobSucceeded, output: "fetched"})
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	got = h.group(t, gs, g.ID)
	if st := memberStates(got); got.State != backend.GroupSucceeded || got.FinishedAt.IsZero() || st["fetch"] != backend.JobSucceeded || st["render"] != backend.JobSucceeded {
		t.Fatalf("Group = %+v after every task succeeded, want succeeded with a finish time", got)
	}

	g2, deps2 := workflow(q, "", []string{"t1"}, []string{"t2", "t1"})
	mustSettle(t, "PublishGroup", gs.PublishGroup(h.ctx(), g2, deps2))
	d, _ = h.receiveNamed(t, s, "t1")
	mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "broken"))
	h.expectNothing(t, q, s)
	got = h.groupOnceEnded(t, gs, g2.ID)
	if st := memberStates(got); got.State != backend.GroupFailed || st["t1"] != backend.JobDead || st["t2"] != backend.JobCancelled || got.Members[1].Reason == "" {
		t.Fatalf("Group = %+v after t1 died, want failed, t1 dead, t2 cancelled with a reason", got)
	}

	// A batch of two jobs and its callbacks, on their own queue.
	cb := h.declare(t, 8, 0)
	j1, j2, onc, ons := job(q, "j1"), job(q, "j2"), job(cb, "on complete"), job(cb, "on success")
	batch := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupBatch, Members: []backend.GroupMember{
		{ID: j1.ID, Queue: q.Name}, {ID: j2.ID, Queue: q.Name},
		{ID: onc.ID, Queue: cb.Name, Role: backend.RoleOnComplete}, {ID: ons.ID, Queue: cb.Name, Role: backend.RoleOnSuccess},
	}}
	mustSettle(t, "PublishGroup of a batch", gs.PublishGroup(h.ctx(), batch, []backend.Dependent{
		plain(j1), plain(j2), dependent(onc, backend.OnFailureRun, j1.ID, j2.ID), dependent(ons, backend.OnFailureCancel, j1.ID, j2.ID),
	}))
	h.ackNext(t, s, "j1")
	if got := h.group(t, gs, batch.ID); got.State != backend.GroupRunning || memberStates(got)[backend.RoleOnComplete] != backend.JobWaiting {
		t.Fatalf("batch %+v with a job left, want running and on_complete waiting", got)
	}
	d, _ = h.receiveNamed(t, s, "j2")
	mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "died"))
	sc := h.consume(t, cb)
	d, _ = h.receiveNamed(t, sc, "on complete")
	expectAwaited(t, h.awaited(t, d),
		result{id: j1.ID, queue: q.Name, state: backend.JobSucceeded},
		result{id: j2.ID, queue: q.Name, state: backend.JobDead, reason: "died"})
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, cb, sc) // on_success was cancelled
	got = h.groupOnceEnded(t, gs, batch.ID)
	st := memberStates(got)
	if got.Kind != backend.GroupBatch || got.State != backend.GroupFailed || st[backend.RoleOnComplete] != backend.JobSucceeded || st[backend.RoleOnSuccess] != backend.JobCancelled || st[j1.ID] != backend.JobSucceeded || st[j2.ID] != backend.JobDead {
		t.Fatalf("batch = %+v, want failed, on_complete succeeded, on_success cancelled", got)
	}

	if _, err := gs.Group(h.ctx(), "no-such-group"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Group of an unknown id: %v, want ErrNotFound", err)
	}
	bad, badDeps := workflow(q, "", []string{"x"}, []string{"y", "x"})
	badDeps[1].Envelope.ID = backend.NewID() // disagrees with its member
	if err := gs.PublishGroup(h.ctx(), bad, badDeps); err == nil {
		t.Fatal("PublishGroup with a member whose id is not its job's succeeded")
	}
	if _, err := gs.Group(h.ctx(), bad.ID); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Group of a refused group: %v, want ErrNotFound", err)
	}
	h.expectNothing(t, q, s)
}

// testGroupsCancelAndList: CancelGroup marks the group cancelled, cancels its members
// that have not ended and are not running (a waiting one is never delivered), returns
// the running ones, and refuses a group that ended; ListGroups lists one kind, newest
// first, a page at a time.
func testGroupsCancelAndList(t *testing.T, h *harness) {
	gs := implements[backend.GroupStore](t, h)
	q := h.declare(t, 8, 0)
	g, deps := workflow(q, backend.OnFailureRun, []string{"t1"}, []string{"t2"}, []string{"t3", "t1"})
	deps[1].Delay = time.Hour // t2 waits for its delay: no stream takes it
	mustSettle(t, "PublishGroup", gs.PublishGroup(h.ctx(), g, deps))
	s := h.consume(t, q)
	d, _ := h.receiveNamed(t, s, "t1")
	running, err := gs.CancelGroup(h.ctx(), g.ID, "operator")
	if err != nil || !slices.Equal(running, []string{g.Members[0].ID}) {
		t.Fatalf("CancelGroup = %v, %v; want t1 running", running, err)
	}
	mustSettle(t, "Ack of the running task", d.Ack(h.ctx()))
	h.expectNothing(t, q, s) // t3, which runs whatever t1 did, was cancelled
	got := h.group(t, gs, g.ID)
	if st := memberStates(got); got.State != backend.GroupCancelled || st["t2"] != backend.JobCancelled || st["t3"] != backend.JobCancelled {
		t.Fatalf("Group = %+v after CancelGroup, want cancelled with t2 and t3 cancelled", got)
	}
	if _, err := gs.CancelGroup(h.ctx(), g.ID, "again"); !errors.Is(err, backend.ErrJobState) {
		t.Fatalf("CancelGroup of a cancelled group: %v, want ErrJobState", err)
	}
	if _, err := gs.CancelGroup(h.ctx(), "no-such-group", "x"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("CancelGroup of an unknown group: %v, want ErrNotFound", err)
	}
	if st := h.stats(t, q); st.Waiting != 0 || st.Delayed != 0 {
		t.Fatalf("stats %+v after CancelGroup, want nothing waiting or delayed", st)
	}

	ids := []string{g.ID}
	for range 2 {
		w, wdeps := workflow(q, "", []string{"only"})
		mustSettle(t, "PublishGroup", gs.PublishGroup(h.ctx(), w, wdeps))
		ids = append(ids, w.ID)
	}
	other := h.declare(t, 8, 0)
	b := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupBatch}
	bj := job(other, "batch job")
	b.Members = []backend.GroupMember{{ID: bj.ID, Queue: other.Name}}
	mustSettle(t, "PublishGroup of a batch", gs.PublishGroup(h.ctx(), b, []backend.Dependent{plain(bj)}))
	var listed []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("ListGroups does not end: %v", listed)
		}
		page, err := gs.ListGroups(h.ctx(), backend.GroupWorkflow, cursor, 2)
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		if len(page.Groups) > 2 {
			t.Fatalf("a page of limit 2 holds %d groups", len(page.Groups))
		}
		for _, g := range page.Groups {
			listed = append(listed, g.ID)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	slices.Reverse(ids)
	if !slices.Equal(listed, ids) {
		t.Fatalf("ListGroups of workflows gave %v, want %v, newest first", listed, ids)
	}
	page, err := gs.ListGroups(h.ctx(), backend.GroupBatch, "", 0)
	if err != nil || len(page.Groups) != 1 || page.Groups[0].ID != b.ID || page.Next != "" {
		t.Fatalf("ListGroups of batches = %+v, %v; want the one batch", page, err)
	}
}

// testDependentsUnderConcurrency: 200 dependents over 50 awaited jobs settled from 8
// goroutines: every dependent is delivered exactly once, never before each job it
// awaits ended, and reads each as ended.
func testDependentsUnderConcurrency(t *testing.T, h *harness) {
	dp := implements[backend.DependentPublisher](t, h)
	work := h.declare(t, 4, 0)
	after := h.declare(t, 16, 0)
	const nAwaited, nDeps, consumers = 50, 200, 8
	var deps []backend.Dependent
	var awaitedIDs []string
	for i := range nAwaited {
		env := job(work, fmt.Sprint(i))
		awaitedIDs = append(awaitedIDs, env.ID)
		deps = append(deps, plain(env))
	}
	rng := rand.New(rand.NewPCG(26, 1))
	awaits := make(map[string][]string)
	for i := range nDeps {
		env := job(after, fmt.Sprint("dep", i))
		var ids []string
		for _, j := range rng.Perm(nAwaited)[:1+rng.IntN(5)] {
			ids = append(ids, awaitedIDs[j])
		}
		awaits[env.ID] = ids
		deps = append(deps, dependent(env, backend.OnFailureRun, ids...))
	}
	h.publishDependents(t, dp, deps...)

	var mu sync.Mutex
	settling := make(map[string]bool) // awaited jobs whose settle has begun
	settled := 0
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	var wg sync.WaitGroup
	for c := range consumers {
		s := h.consume(t, work)
		wg.Go(func() {
			settleEach(s, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return settled == nAwaited || firstErr != nil
			}, fail, func(d backend.Delivery, env backend.Envelope) error {
				mu.Lock()
				settling[env.ID] = true
				mu.Unlock()
				var err error
				if (c+int(env.Payload[0]))%5 == 0 {
					err = d.DeadLetter(h.ctx(), "unlucky")
				} else {
					err = d.(backend.AtomicDelivery).AckWith(h.ctx(), nil, &backend.JobRecord{Output: env.Payload})
				}
				if err != nil {
					return err
				}
				mu.Lock()
				settled++
				mu.Unlock()
				return nil
			})
		})
	}
	sa := h.consume(t, after)
	seen := make(map[string]int)
	for range nDeps {
		d, env := h.receive(t, sa)
		seen[env.ID]++
		if seen[env.ID] > 1 {
			t.Fatalf("dependent %s delivered twice", env.Payload)
		}
		mu.Lock()
		for _, id := range awaits[env.ID] {
			if !settling[id] {
				mu.Unlock()
				t.Fatalf("dependent %s delivered before the settle of %s, which it awaits, began", env.Payload, id)
			}
		}
		mu.Unlock()
		res := h.awaited(t, d)
		if len(res) != len(awaits[env.ID]) {
			t.Fatalf("dependent %s reads %d results, want %d", env.Payload, len(res), len(awaits[env.ID]))
		}
		for i, r := range res {
			if r.ID != awaits[env.ID][i] || !r.State.Finished() {
				t.Fatalf("dependent %s reads %+v at %d, want %s ended", env.Payload, r, i, awaits[env.ID][i])
			}
		}
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	h.expectNothing(t, after, sa)
	if st := h.stats(t, after); st.Waiting != 0 {
		t.Fatalf("stats %+v after every dependent ran, want none waiting", st)
	}
}

// testWaitingHoldsNoKeyPlace: a parent waiting for its children holds no place in its
// concurrency key's line (the key's next job runs meanwhile), and takes one at the
// back when it comes back.
func testWaitingHoldsNoKeyPlace(t *testing.T, h *harness) {
	implements[backend.DependentPublisher](t, h)
	q := h.declareKeys(t, 4, 1)
	kids := h.declare(t, 4, 0)
	h.publish(t, keyed(q, "k", "parent"), 0)
	h.publish(t, keyed(q, "k", "next"), 0)
	s := h.consume(t, q)
	d, _ := h.receiveNamed(t, s, "parent")
	child := job(kids, "child")
	mustSettle(t, "WaitWith", d.(backend.WaitingDelivery).WaitWith(h.ctx(), []backend.Publication{{Envelope: child}}, backend.Await{IDs: []string{child.ID}}, nil))
	dn, _ := h.receiveNamed(t, s, "next") // the key is free while its holder waits
	h.ackNext(t, h.consume(t, kids), "child")
	h.waitStats(t, q, "parent back, waiting for its key behind next", func(st backend.QueueStats) bool { return st.KeyWaiting == 1 && st.Waiting == 0 })
	h.expectNothing(t, q, s) // the parent is back, behind next in its key's line
	mustSettle(t, "Ack", dn.Ack(h.ctx()))
	h.ackNext(t, s, "parent")
}
