package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

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
