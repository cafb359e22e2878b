package backendtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// optionalRules are the rules of the optional interfaces. Each runs only on a backend
// that implements its interface, and is skipped (saying so) on the others.
var optionalRules = []rule{
	{"BatchPublishAllOrNothing", testBatchPublish},
	{"AckWithChildrenIsAtomic", testAckWithChildren},
	{"SettlesWithRecordWriteTheRecord", testSettleRecords},
	{"JobRecordsFollowPublishAndSettle", testJobRecords},
	{"RepeatPublishOfAHeldIDIsDropped", testRepeatPublishDropped},
	{"UniqueKeyHeldWhileAliveAndFor", testUniqueStates},
	{"UniqueKeysPerJobOfABatch", testUniqueBatch},
	{"UniqueUnderConcurrency", testUniqueConcurrent},
	{"JobControlCancelRetryDelete", testJobControl},
	{"UniqueKeyEndsOnCancelOrDelete", testUniqueControl},
	{"ListJobsNewestFirstWithCursor", testListJobs},
}

func batchPublisher(t *testing.T, h *harness) backend.BatchPublisher {
	t.Helper()
	bp, ok := h.b.(backend.BatchPublisher)
	if !ok {
		t.Skipf("%T does not implement backend.BatchPublisher", h.b)
	}
	return bp
}

func recordReader(t *testing.T, h *harness) backend.JobRecordReader {
	t.Helper()
	r, ok := h.b.(backend.JobRecordReader)
	if !ok {
		t.Skipf("%T does not implement backend.JobRecordReader", h.b)
	}
	return r
}

// atomicDelivery receives the next delivery of s and skips the test unless it is an
// AtomicDelivery.
func (h *harness) atomicDelivery(t *testing.T, s backend.Stream) (backend.AtomicDelivery, backend.Envelope) {
	t.Helper()
	d, env := h.receive(t, s)
	ad, ok := d.(backend.AtomicDelivery)
	if !ok {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
		t.Skipf("%T's deliveries do not implement backend.AtomicDelivery", h.b)
	}
	return ad, env
}

func testBatchPublish(t *testing.T, h *harness) {
	bp := batchPublisher(t, h)
	q := h.declare(t, 16, 0)
	nowhere := h.prefix + "-nowhere"
	bad := []backend.Publication{{Envelope: job(q, "x1")}, {Envelope: backend.NewEnvelope(nowhere, nil)}, {Envelope: job(q, "x2")}}
	if err := bp.PublishBatch(h.ctx(), bad); !errors.Is(err, backend.ErrUnknownQueue) || !strings.Contains(err.Error(), nowhere) {
		t.Fatalf("PublishBatch with a job to an undeclared queue: %v, want ErrUnknownQueue naming it", err)
	}
	if err := bp.PublishBatch(h.ctx(), nil); err != nil {
		t.Fatalf("PublishBatch(nil): %v", err)
	}
	good := []backend.Publication{{Envelope: job(q, "a")}, {Envelope: job(q, "late"), Delay: 200 * time.Millisecond}, {Envelope: job(q, "b")}}
	start := time.Now()
	if err := bp.PublishBatch(h.ctx(), good); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	// Nothing of the failed batch, the good one in order, its delayed job not early.
	got := h.drainInOrder(t, q, 3)
	if strings.Join(got, " ") != "a b late" {
		t.Fatalf("delivered %q, want [a b late]: a failed batch must publish nothing", got)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("the delayed job of the batch came after %v: early", waited)
	}
}

func testAckWithChildren(t *testing.T, h *harness) {
	parents := h.declare(t, 4, 0)
	kids := h.declare(t, 16, 0)
	h.publish(t, job(parents, "parent"), 0)
	s := h.consume(t, parents)
	d, env := h.atomicDelivery(t, s)
	nowhere := h.prefix + "-nowhere"
	// A child that cannot be published fails the whole settle: no child, no ack.
	bad := []backend.Publication{{Envelope: job(kids, "k0")}, {Envelope: backend.NewEnvelope(nowhere, nil)}}
	if err := d.AckWith(h.ctx(), bad, nil); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Fatalf("AckWith a child to an undeclared queue: %v, want ErrUnknownQueue", err)
	}
	ks := h.consume(t, kids)
	h.expectNothing(t, kids, ks)
	// A child whose id the backend holds is not published again, and an id repeated
	// within the batch is published once.
	held := job(kids, "held")
	h.publish(t, held, 0)
	again := held
	again.Payload = []byte("held-again")
	k1 := job(kids, "k1")
	children := []backend.Publication{
		{Envelope: k1},
		{Envelope: job(kids, "k2")},
		{Envelope: job(kids, "k3"), Delay: 100 * time.Millisecond},
		{Envelope: again},
		{Envelope: k1},
	}
	if err := d.AckWith(h.ctx(), children, nil); err != nil {
		t.Fatalf("AckWith after the failed one (the delivery must have stayed unsettled): %v", err)
	}
	if err := d.Ack(h.ctx()); !errors.Is(err, backend.ErrAlreadySettled) {
		t.Fatalf("Ack after AckWith: %v, want ErrAlreadySettled", err)
	}
	var got []string
	for range 4 {
		kd, kenv := h.receive(t, ks)
		got = append(got, string(kenv.Payload))
		mustSettle(t, "Ack", kd.Ack(h.ctx()))
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "held k1 k2 k3" {
		t.Fatalf("children delivered: %q, want held k1 k2 k3 (the held id and the repeat dropped)", got)
	}
	h.expectNothing(t, kids, ks)
	s.Drop()
	h.expectNothing(t, parents, h.consume(t, parents)) // the parent was acknowledged
	_ = env
}

func testSettleRecords(t *testing.T, h *harness) {
	rr := recordReader(t, h)
	q := h.declare(t, 8, 1)
	kids := h.declare(t, 8, 0)
	for _, p := range []string{"ack", "retry", "defer", "dead"} {
		h.publish(t, job(q, p), 0)
	}
	s := h.consume(t, q)
	started := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	run := func() *backend.JobRecord {
		return &backend.JobRecord{
			Output: []byte("out"), Logs: []string{"line 1", "line 2"}, Module: "mod", ModuleVersion: "v1",
			StartedAt: started, FinishedAt: started.Add(time.Second),
		}
	}
	ids := make(map[string]string)
	var child backend.Envelope
	for range 4 {
		d, env := h.atomicDelivery(t, s)
		ids[string(env.Payload)] = env.ID
		next := env
		next.Attempt++
		next.Reason = "because " + string(env.Payload)
		switch string(env.Payload) {
		case "ack":
			child = job(kids, "child")
			mustSettle(t, "AckWith", d.AckWith(h.ctx(), []backend.Publication{{Envelope: child}}, run()))
		case "retry":
			mustSettle(t, "RetryWith", d.RetryWith(h.ctx(), next, time.Hour, run()))
		case "defer":
			next.Priority = 1
			mustSettle(t, "DeferWith", d.DeferWith(h.ctx(), next, time.Hour, run()))
		case "dead":
			mustSettle(t, "DeadLetterWith", d.DeadLetterWith(h.ctx(), "because dead", run()))
		}
	}
	want := map[string]struct {
		state  backend.JobState
		reason string
	}{
		"ack":   {backend.JobSucceeded, ""},
		"retry": {backend.JobRetrying, "because retry"},
		"defer": {backend.JobDeferred, "because defer"},
		"dead":  {backend.JobDead, "because dead"},
	}
	for p, w := range want {
		rec, err := rr.JobRecord(h.ctx(), ids[p])
		if err != nil {
			t.Fatalf("JobRecord(%s): %v", p, err)
		}
		if rec.ID != ids[p] || rec.Queue != q.Name || rec.State != w.state || rec.Reason != w.reason ||
			string(rec.Output) != "out" || strings.Join(rec.Logs, "|") != "line 1|line 2" || rec.Module != "mod" ||
			rec.ModuleVersion != "v1" || !rec.StartedAt.Equal(started) || rec.Attempt != 1 {
			t.Errorf("record of %s = %+v, want state %s, reason %q and the run's details", p, rec, w.state, w.reason)
		}
	}
	rec, err := rr.JobRecord(h.ctx(), ids["ack"])
	mustSettle(t, "JobRecord", err)
	if len(rec.Children) != 1 || rec.Children[0] != child.ID {
		t.Errorf("children of the acked job = %q, want [%s]", rec.Children, child.ID)
	}
	crec, err := rr.JobRecord(h.ctx(), child.ID)
	if err != nil || crec.State != backend.JobPending || crec.Queue != kids.Name {
		t.Errorf("record of the child = %+v, %v; want pending on %s", crec, err, kids.Name)
	}
}

func testJobRecords(t *testing.T, h *harness) {
	rr := recordReader(t, h)
	q := h.declare(t, 8, 0)
	if _, err := rr.JobRecord(h.ctx(), "no-such-job"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("JobRecord of an unknown id: %v, want ErrNotFound", err)
	}
	now, later := job(q, "now"), job(q, "later")
	later.MaxAttempts = 5
	h.publish(t, now, 0)
	h.publish(t, later, time.Hour)
	state := func(id string) backend.JobRecord {
		t.Helper()
		rec, err := rr.JobRecord(h.ctx(), id)
		if err != nil {
			t.Fatalf("JobRecord(%s): %v", id, err)
		}
		return rec
	}
	if r := state(now.ID); r.State != backend.JobPending || r.Attempt != 1 || r.Queue != q.Name || !r.CreatedAt.Equal(now.EnqueuedAt) {
		t.Errorf("record after publish = %+v, want pending at attempt 1", r)
	}
	if r := state(later.ID); r.State != backend.JobDelayed || r.MaxAttempts != 5 {
		t.Errorf("record after a delayed publish = %+v, want delayed with max attempts 5", r)
	}
	s := h.consume(t, q)
	d, env := h.receive(t, s)
	if r := state(env.ID); r.State != backend.JobRunning {
		t.Errorf("record of a delivered job = %s, want running", r.State)
	}
	next := env
	next.Attempt, next.Reason = 2, "flaky"
	mustSettle(t, "Retry", d.Retry(h.ctx(), next, 0))
	// The retry is written: retrying with its reason, or running with it when the
	// next attempt was already handed to the stream (claims are not written). A record
	// still "pending" from the publish, or without the reason, was never updated.
	if r := state(env.ID); (r.State != backend.JobRetrying && r.State != backend.JobRunning) || r.Reason != "flaky" {
		t.Errorf("record after a plain Retry = %s with reason %q, want retrying (or running) with reason \"flaky\"", r.State, r.Reason)
	}
	d, env = h.receive(t, s)
	mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "gave up"))
	if r := state(env.ID); r.State != backend.JobDead || r.Reason != "gave up" || r.Attempt != 2 || r.FinishedAt.IsZero() {
		t.Errorf("record after DeadLetter = %+v, want dead at attempt 2 with the reason and a finish time", r)
	}
}

func testRepeatPublishDropped(t *testing.T, h *harness) {
	recordReader(t, h) // backends that keep records know the ids they hold
	q := h.declare(t, 8, 0)
	env := job(q, "once")
	h.publish(t, env, 0)
	h.publish(t, env, 0)         // held: dropped, reported as success
	h.publish(t, env, time.Hour) // held: dropped, even with a delay
	if bp, ok := h.b.(backend.BatchPublisher); ok {
		if err := bp.PublishBatch(h.ctx(), []backend.Publication{{Envelope: env}, {Envelope: env}}); err != nil {
			t.Fatalf("PublishBatch of a held id: %v", err)
		}
	}
	if st := h.stats(t, q); st.Pending != 1 || st.Delayed != 0 {
		t.Fatalf("stats after repeat publishes of a held id %+v, want 1 pending and nothing delayed", st)
	}
	s := h.consume(t, q)
	d, got := h.receive(t, s)
	if got.ID != env.ID {
		t.Fatalf("got %s, want %s", got.ID, env.ID)
	}
	h.publish(t, env, 0) // handed out, still held: dropped
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
	h.publish(t, env, 0) // gone from the backend: published again
	d, got = h.receive(t, s)
	if got.ID != env.ID {
		t.Fatalf("got %s, want %s", got.ID, env.ID)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
}
