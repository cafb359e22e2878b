package backendtest

import (
	"errors"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func jobController(t *testing.T, h *harness) backend.JobController {
	t.Helper()
	c, ok := h.b.(backend.JobController)
	if !ok {
		t.Skipf("%T does not implement backend.JobController", h.b)
	}
	return c
}

// testJobControl: a cancelled or deleted waiting job is never delivered, a delayed job
// retried now comes at once, a dead letter retried now comes back at attempt 1, and an
// unknown id is ErrNotFound.
func testJobControl(t *testing.T, h *harness) {
	c := jobController(t, h)
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
