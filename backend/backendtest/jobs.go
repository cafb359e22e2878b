package backendtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func testSettleRecords(t *testing.T, h *harness) {
	rr := implements[backend.JobRecordReader](t, h)
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
	rr := implements[backend.JobRecordReader](t, h)
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

// testJobControl: a cancelled or deleted waiting job is never delivered, a delayed job
// retried now comes at once, a dead letter retried now comes back at attempt 1, and an
// unknown id is ErrNotFound.
func testJobControl(t *testing.T, h *harness) {
	c := implements[backend.JobController](t, h)
	q := h.declare(t, 8, 0)
	ready, later, soon, gone := job(q, "ready"), job(q, "later"), job(q, "soon"), job(q, "gone")
	h.publish(t, ready, 0)
	h.publish(t, later, time.Hour)
	h.publish(t, soon, time.Hour)
	h.publish(t, gone, time.Hour)
	for _, id := range []string{ready.ID, later.ID} {
		if err := c.CancelJob(h.ctx(), id); err != nil {
			t.Fatalf("CancelJob(%s): %v", id, err)
		}
	}
	if err := c.CancelJob(h.ctx(), ready.ID); !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrJobState) {
		t.Errorf("CancelJob of a cancelled job: %v, want ErrNotFound or ErrJobState", err)
	}
	if err := c.DeleteJob(h.ctx(), gone.ID); err != nil {
		t.Fatalf("DeleteJob(%s) of a delayed job: %v", gone.ID, err)
	}
	if err := c.CancelJob(h.ctx(), "no-such-job"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("CancelJob of an unknown id: %v, want ErrNotFound", err)
	}
	if sr, ok := h.b.(backend.StatsReader); ok {
		st, err := sr.QueueStats(h.ctx(), q.Name)
		if err != nil || st.Pending != 0 || st.Delayed != 1 {
			t.Errorf("QueueStats after cancelling one ready and two delayed of four = %+v, %v; want 0 pending, 1 delayed", st, err)
		}
	}
	if er, ok := h.b.(backend.JobEnvelopeReader); ok {
		env, err := er.JobEnvelope(h.ctx(), soon.ID)
		if err != nil || env.ID != soon.ID || string(env.Payload) != "soon" {
			t.Errorf("JobEnvelope of a delayed job = %+v, %v; want its payload", env, err)
		}
		if _, err := er.JobEnvelope(h.ctx(), later.ID); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("JobEnvelope of a cancelled job: %v, want ErrNotFound", err)
		}
	}
	if err := c.RetryJobNow(h.ctx(), soon.ID); err != nil {
		t.Fatalf("RetryJobNow(%s) of a job delayed by an hour: %v", soon.ID, err)
	}
	s := h.consume(t, q)
	d, env := h.receive(t, s)
	if env.ID != soon.ID {
		t.Fatalf("first delivery = %s (%q), want %s, retried now; the cancelled jobs must never come", env.ID, env.Payload, soon.ID)
	}
	if err := c.CancelJob(h.ctx(), env.ID); !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrJobState) {
		t.Errorf("CancelJob of a running job: %v, want ErrJobState (or ErrNotFound from a backend without records)", err)
	}
	mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "broken"))
	if er, ok := h.b.(backend.JobEnvelopeReader); ok {
		if env, err := er.JobEnvelope(h.ctx(), soon.ID); err != nil || string(env.Payload) != "soon" {
			t.Errorf("JobEnvelope of a dead letter = %+v, %v; want its payload", env, err)
		}
	}
	if err := c.RetryJobNow(h.ctx(), soon.ID); err != nil {
		t.Fatalf("RetryJobNow(%s) of a dead letter: %v", soon.ID, err)
	}
	d, env = h.receive(t, s)
	if env.ID != soon.ID || env.Attempt != 1 {
		t.Fatalf("after retrying a dead letter: delivery %s at attempt %d, want %s at 1", env.ID, env.Attempt, soon.ID)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
}

// testListJobs: a queue's jobs come newest first, filtered by state, page by page.
func testListJobs(t *testing.T, h *harness) {
	l, ok := h.b.(backend.JobLister)
	if !ok {
		t.Skipf("%T does not implement backend.JobLister", h.b)
	}
	q, other := h.declare(t, 8, 0), h.declare(t, 8, 0)
	var ids []string
	for i := range 5 {
		env := job(q, "j")
		env.ID = backend.NewID()
		if i == 4 {
			h.publish(t, env, time.Hour)
		} else {
			h.publish(t, env, 0)
		}
		h.publish(t, job(other, "o"), 0)
		ids = append(ids, env.ID)
		time.Sleep(2 * time.Millisecond) // ids sort by the millisecond
	}
	var got []string
	cursor := ""
	for range 10 {
		page, err := l.ListJobs(h.ctx(), q.Name, backend.JobFilter{Cursor: cursor, Limit: 2})
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		for _, r := range page.Jobs {
			got = append(got, r.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v (newest first, this queue's only)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("listed %v, want %v (newest first, this queue's only)", got, want)
		}
	}
	page, err := l.ListJobs(h.ctx(), q.Name, backend.JobFilter{State: backend.JobDelayed})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != ids[4] {
		t.Fatalf("ListJobs(delayed) = %+v, %v; want the one delayed job", page, err)
	}
	if _, err := l.ListJobs(h.ctx(), h.prefix+"-nowhere", backend.JobFilter{}); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Errorf("ListJobs of an undeclared queue: %v, want ErrUnknownQueue", err)
	}
}

// testCancelRunning: a delivery settled as cancelled (backend.CancellableDelivery)
// settles once, leaves its queue for good (never delivered again, not dead-lettered),
// frees its prefetch slot, and, where records are kept, leaves its record cancelled
// with the reason, the run's details and the attempt appended.
func testCancelRunning(t *testing.T, h *harness) {
	q := h.declare(t, 1, 0)
	s := h.consume(t, q)
	h.publish(t, job(q, "running"), 0)
	d, env := h.receive(t, s)
	cd, ok := d.(backend.CancellableDelivery)
	if !ok {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
		t.Skipf("%T's deliveries do not implement backend.CancellableDelivery", h.b)
	}
	started := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	run := &backend.JobRecord{Output: []byte("partial"), Module: "mod", ModuleVersion: "v1", StartedAt: started, FinishedAt: started.Add(time.Second)}
	const reason = "cancelled by an operator"
	mustSettle(t, "Cancel", cd.Cancel(h.ctx(), reason, run))
	next := env
	next.Attempt++
	again := map[string]error{
		"Cancel":     cd.Cancel(h.ctx(), "again", nil),
		"Ack":        d.Ack(h.ctx()),
		"Retry":      d.Retry(h.ctx(), next, 0),
		"DeadLetter": d.DeadLetter(h.ctx(), "again"),
	}
	for op, err := range again {
		if !errors.Is(err, backend.ErrAlreadySettled) {
			t.Errorf("%s after Cancel: %v, want ErrAlreadySettled", op, err)
		}
	}
	// Under prefetch 1, the next job comes only if the cancel freed the slot.
	h.publish(t, job(q, "after"), 0)
	d2, env2 := h.receive(t, s)
	if string(env2.Payload) != "after" {
		t.Fatalf("after the cancel got %s (payload %q), want the next job", env2.ID, env2.Payload)
	}
	mustSettle(t, "Ack", d2.Ack(h.ctx()))
	h.expectNothing(t, q, s)
	if dead := h.deadLetters(t, q); len(dead) != 0 {
		t.Errorf("dead letters after a cancel = %+v, want none", dead)
	}
	h.waitStats(t, q, "empty queue", func(st backend.QueueStats) bool { return st.Pending == 0 && st.Unacked == 0 && st.Delayed == 0 })
	rr, ok := h.b.(backend.JobRecordReader)
	if !ok {
		return
	}
	rec, err := rr.JobRecord(h.ctx(), env.ID)
	if err != nil {
		t.Fatalf("JobRecord: %v", err)
	}
	if rec.State != backend.JobCancelled || rec.Reason != reason || rec.Attempt != 1 || string(rec.Output) != "partial" ||
		rec.Module != "mod" || !rec.StartedAt.Equal(started) || rec.FinishedAt.IsZero() || len(rec.Children) != 0 {
		t.Errorf("record after Cancel = %+v, want cancelled with reason %q, the run's details and no children", rec, reason)
	}
	if n := len(rec.Attempts); n != 1 || rec.Attempts[0].State != backend.JobCancelled || rec.Attempts[0].Reason != reason || rec.Attempts[0].Attempt != 1 {
		t.Errorf("attempts after Cancel = %+v, want one, cancelled with reason %q", rec.Attempts, reason)
	}
}
