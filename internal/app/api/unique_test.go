package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// plainBackend hides every optional interface of its backend, as RabbitMQ has none of
// the unique ones.
type plainBackend struct{ backend.Backend }

// A job with a unique_key is queued once (202); enqueued again while the first waits,
// it is a duplicate (200, "duplicate": true) naming the first, and nothing is queued.
// In a batch each job is judged on its own. Both backends that keep keys answer alike.
func TestUniqueEnqueue(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, r *apiRig) {
		job := `{"queue": "echo", "payload": "a", "delay": "1h", "unique_key": "%s", "unique_for": "10m"}`
		status, first := r.call(t, "POST", "/v1/jobs", fmt.Sprintf(job, "k"))
		if status != 202 || first["id"] == nil || first["duplicate"] != nil {
			t.Fatalf("first enqueue: %d %v, want 202 with an id", status, first)
		}
		status, dup := r.call(t, "POST", "/v1/jobs", fmt.Sprintf(job, "k"))
		if status != 200 || dup["id"] != first["id"] || dup["duplicate"] != true {
			t.Fatalf("second enqueue: %d %v, want 200, duplicate of %v", status, dup, first["id"])
		}
		batch := fmt.Sprintf(`{"jobs": [%s, %s, {"queue": "echo", "payload": "b", "delay": "1h"}, %s]}`,
			fmt.Sprintf(job, "k"), fmt.Sprintf(job, "new"), fmt.Sprintf(job, "new"))
		status, body := r.call(t, "POST", "/v1/jobs/batch", batch)
		ids, _ := body["ids"].([]any)
		dups, _ := body["duplicates"].([]any)
		if status != 202 || len(ids) != 4 || len(dups) != 4 || ids[0] != first["id"] || ids[3] != ids[1] ||
			fmt.Sprint(dups) != "[true false false true]" {
			t.Fatalf("batch: %d %v, want 202, ids [first, new, plain, new] and duplicates [true false false true]", status, body)
		}
		status, body = r.call(t, "POST", "/v1/jobs/batch", fmt.Sprintf(`{"jobs": [%s]}`, fmt.Sprintf(job, "k")))
		if status != 200 || fmt.Sprint(body["duplicates"]) != "[true]" {
			t.Fatalf("batch of duplicates only: %d %v, want 200", status, body)
		}
		for _, bad := range []struct{ body, want string }{
			{`{"queue": "echo", "unique_key": "k", "unique_for": "soon"}`, `unique_for: want a duration such as "10m" or "24h", got "soon"`},
			{`{"queue": "echo", "unique_for": "1h"}`, "unique_for 1h0m0s without unique_key"},
			{`{"queue": "echo", "unique_key": "k", "unique_for": "-1s"}`, "unique_for -1s is negative"},
		} {
			if status, body := r.call(t, "POST", "/v1/jobs", bad.body); status != 400 || !strings.Contains(fmt.Sprint(body["error"]), bad.want) {
				t.Errorf("%s: %d %v, want 400 %q", bad.body, status, body, bad.want)
			}
		}
	})
}

// A backend that cannot keep keys (RabbitMQ) refuses a unique job with 501 saying why
// and what to do, rather than queue it with a uniqueness that would not hold; jobs
// without a key are not affected.
func TestUniqueRefusedWhereItCannotHold(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, on(plainBackend{memory.New(memory.Config{})}), "")
	for _, path := range []string{"/v1/jobs", "/v1/jobs/batch"} {
		body := `{"queue": "echo", "payload": "a", "unique_key": "k"}`
		if path == "/v1/jobs/batch" {
			body = `{"jobs": [{"queue": "echo", "payload": "b"}, ` + body + `]}`
		}
		status, out := r.call(t, "POST", path, body)
		if msg := fmt.Sprint(out["error"]); status != 501 || !strings.Contains(msg, "unique_key is not supported by this backend") || !strings.Contains(msg, "pebble") {
			t.Fatalf("%s with a unique_key on a backend without keys: %d %v, want 501 saying why", path, status, out)
		}
	}
	if status, out := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload": "a"}`); status != 202 {
		t.Fatalf("a job without a key: %d %v", status, out)
	}
}

// A job's key (its concurrency key) reaches the backend's envelope, alone and in a
// batch, and is not a unique key: the same key twice queues two jobs. A key past its
// limit is a 400 naming the field.
func TestEnqueueKey(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, r *apiRig) {
		job := `{"queue": "echo", "payload": "a", "delay": "1h", "key": "account-42"}`
		status, first := r.call(t, "POST", "/v1/jobs", job)
		if status != 202 || first["id"] == nil {
			t.Fatalf("enqueue with a key: %d %v, want 202 with an id", status, first)
		}
		status, body := r.call(t, "POST", "/v1/jobs/batch", `{"jobs": [`+job+`, {"queue": "echo", "delay": "1h"}]}`)
		ids, _ := body["ids"].([]any)
		if status != 202 || len(ids) != 2 || body["duplicates"] != nil {
			t.Fatalf("batch with a key: %d %v, want 202 and two new jobs", status, body)
		}
		er := r.Backend.(backend.JobEnvelopeReader)
		for id, want := range map[any]string{first["id"]: "account-42", ids[0]: "account-42", ids[1]: ""} {
			env, err := er.JobEnvelope(context.Background(), fmt.Sprint(id))
			if err != nil || env.Key != want {
				t.Errorf("envelope of %v: key %q, %v; want %q", id, env.Key, err, want)
			}
		}
		long := fmt.Sprintf(`{"queue": "echo", "key": %q}`, strings.Repeat("k", 513))
		if status, body := r.call(t, "POST", "/v1/jobs", long); status != 400 || !strings.Contains(fmt.Sprint(body["error"]), "key of 513 bytes passes the limit of 512 bytes") {
			t.Errorf("a key of 513 bytes: %d %v, want 400 naming the limit", status, body)
		}
	})
}
