package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestJobActionsThroughTheAPI cancels, retries now and deletes jobs through the API on
// both backends that can, and lists a queue's jobs newest first with a cursor.
func TestJobActionsThroughTheAPI(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, r *apiRig) {
		enqueue := func(body string) string {
			t.Helper()
			code, out := r.call(t, "POST", "/v1/jobs", body)
			if code != 202 {
				t.Fatalf("enqueue %s: %d %v", body, code, out)
			}
			time.Sleep(2 * time.Millisecond) // ids order by the millisecond: the listing's order is known
			return out["id"].(string)
		}
		state := func(id string) string {
			_, out := r.call(t, "GET", "/v1/jobs/"+id, "")
			s, _ := out["state"].(string)
			return s
		}
		cancelMe := enqueue(`{"queue":"echo","payload":"a","delay":"1h"}`)
		retryMe := enqueue(`{"queue":"echo","payload":"b","delay":"1h"}`)
		deleteMe := enqueue(`{"queue":"echo","payload":"c","delay":"1h"}`)
		if code, out := r.call(t, "POST", "/v1/jobs/"+cancelMe+"/cancel", ""); code != 200 {
			t.Fatalf("cancel: %d %v", code, out)
		}
		if s := state(cancelMe); s != "cancelled" {
			t.Errorf("after cancel the job is %q, want cancelled", s)
		}
		if code, _ := r.call(t, "POST", "/v1/jobs/"+cancelMe+"/cancel", ""); code != 409 {
			t.Errorf("cancelling a cancelled job: %d, want 409", code)
		}
		if code, out := r.call(t, "POST", "/v1/jobs/"+retryMe+"/retry", ""); code != 200 {
			t.Fatalf("retry: %d %v", code, out)
		}
		deadline := time.Now().Add(10 * time.Second)
		for state(retryMe) != "succeeded" {
			if time.Now().After(deadline) {
				t.Fatalf("the job retried now is %q, not succeeded", state(retryMe))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if code, out := r.call(t, "DELETE", "/v1/jobs/"+deleteMe, ""); code != 200 {
			t.Fatalf("delete: %d %v", code, out)
		}
		if code, _ := r.call(t, "GET", "/v1/jobs/"+deleteMe, ""); code != 404 {
			t.Errorf("a deleted job answers %d, want 404", code)
		}
		if code, _ := r.call(t, "POST", "/v1/jobs/NOSUCHJOB/cancel", ""); code != 404 {
			t.Errorf("cancelling an unknown job: %d, want 404", code)
		}
		code, out := r.call(t, "GET", "/v1/queues/echo/jobs?limit=1", "")
		jobs, _ := out["jobs"].([]any)
		if code != 200 || len(jobs) != 1 || jobs[0].(map[string]any)["id"] != retryMe || out["next"] == "" {
			t.Fatalf("first page of 1 = %d %v; want the newest job left (%s) and a cursor", code, out, retryMe)
		}
		_, out = r.call(t, "GET", fmt.Sprintf("/v1/queues/echo/jobs?limit=1&cursor=%s", out["next"]), "")
		if jobs, _ := out["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["id"] != cancelMe {
			t.Errorf("second page = %v; want %s", out, cancelMe)
		}
		_, out = r.call(t, "GET", "/v1/queues/echo/jobs?state=succeeded", "")
		if jobs, _ := out["jobs"].([]any); len(jobs) != 1 {
			t.Errorf("succeeded jobs = %v; want the one retried", out)
		}
		if code, _ := r.call(t, "GET", "/v1/queues/echo/jobs?state=sleeping", ""); code != 400 {
			t.Errorf("an unknown state: %d, want 400", code)
		}
	})
}

// noControl is a backend without JobController or job records: RabbitMQ's position.
type noControl struct{ backend.Backend }

func TestJobActionsUnavailableAnswer501(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, on(noControl{memory.New(memory.Config{})}), "")
	code, out := r.call(t, "POST", "/v1/jobs/X/cancel", "")
	if code != 501 || out["error"] == nil {
		t.Errorf("cancel on a backend that cannot: %d %v, want 501 with the reason", code, out)
	}
}

// settledFirst is the memory backend whose RetryJobNow returns only once the worker has
// run the job to its end: a retried job that runs and settles before the API's answer
// (as it may on a busy machine) must stay succeeded, not go back to pending.
type settledFirst struct {
	*memory.Backend
	recs *inspect.Records
}

func (b settledFirst) RetryJobNow(ctx context.Context, id string) error {
	if err := b.Backend.RetryJobNow(ctx, id); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if rec, _ := b.recs.JobRecord(ctx, id); rec.State == backend.JobSucceeded {
			return nil
		}
	}
	return fmt.Errorf("job %s did not succeed within 10 s of its retry", id)
}

// settledBeforeCancel is the memory backend whose CancelJob sees the worker settle the
// job (a failed attempt, retrying) just before the cancel lands, as a busy machine may
// order them: the cancel is what the job is left with.
type settledBeforeCancel struct {
	*memory.Backend
	recs *inspect.Records
}

func (b settledBeforeCancel) CancelJob(ctx context.Context, id string) error {
	rec, _ := b.recs.JobRecord(ctx, id)
	b.recs.Observe(worker.Event{Kind: worker.EventSettled, Settle: worker.Retry, Reason: "failed",
		Job: &worker.Job{Envelope: backend.Envelope{ID: id, Queue: rec.Queue}, Attempt: 1, MaxAttempts: 3}})
	return b.Backend.CancelJob(ctx, id)
}

// TestAnActionKeepsWhatTheWorkerRecorded: an operator's action and the worker's record
// of the same job can land in either order on a busy machine; the history ends with the
// newer one. A retried job that ran and settled before the answer stays succeeded; a
// job cancelled just after the worker settled an attempt stays cancelled.
func TestAnActionKeepsWhatTheWorkerRecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, action, want string
		backend            func(*inspect.Records) backend.Backend
	}{
		{"retry now of a job that ran before the answer", "retry", "succeeded",
			func(h *inspect.Records) backend.Backend { return settledFirst{memory.New(memory.Config{}), h} }},
		{"cancel just after the worker settled an attempt", "cancel", "cancelled",
			func(h *inspect.Records) backend.Backend { return settledBeforeCancel{memory.New(memory.Config{}), h} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs := inspect.NewRecords(100)
			r := newRigOn(t, inspecttest.Options{Backend: tc.backend(recs), Records: recs}, "")
			code, out := r.call(t, "POST", "/v1/jobs", `{"queue":"echo","payload":"b","delay":"1h"}`)
			if code != 202 {
				t.Fatalf("enqueue: %d %v", code, out)
			}
			id := out["id"].(string)
			if code, out := r.call(t, "POST", "/v1/jobs/"+id+"/"+tc.action, ""); code != 200 {
				t.Fatalf("%s: %d %v", tc.action, code, out)
			}
			if _, out := r.call(t, "GET", "/v1/jobs/"+id, ""); out["state"] != tc.want {
				t.Errorf("the job is %v, want %s", out["state"], tc.want)
			}
		})
	}
}
