package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
)

// noGroups is a backend that keeps no workflows or batches, as RabbitMQ.
type noGroups struct{ backend.Backend }

// On a backend that cannot hold a job for others, workflows and batches are 501,
// saying why.
func TestWorkflowsUnavailableAnswer501(t *testing.T) {
	t.Parallel()
	r := newRigOn(t, on(noGroups{memory.New(memory.Config{})}), "")
	for _, req := range [][2]string{{"/v1/workflows", `{"tasks": [{"name": "a", "queue": "echo"}]}`}, {"/v1/batches", `{"jobs": [{"queue": "echo"}]}`},
		{"/v1/workflows/01ABC", ""}, {"/v1/batches/01ABC/cancel", ""}} {
		method := "POST"
		if req[1] == "" && !strings.HasSuffix(req[0], "/cancel") {
			method = "GET"
		}
		status, body := r.call(t, method, req[0], req[1])
		if msg, _ := body["error"].(string); status != 501 || !strings.Contains(msg, "cannot hold a task until the jobs it depends on have ended") {
			t.Fatalf("%s %s: %d %v", method, req[0], status, body)
		}
	}
}

// until polls path until its state is want, failing t after 30 s; it returns the body.
func (r *apiRig) until(t *testing.T, path, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := r.call(t, "GET", path, "")
		if status == 200 && body["state"] == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %v, want state %s", path, status, body, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A workflow on the default backend runs each task after those it depends on have
// succeeded; a task whose dependency died is cancelled naming it, or runs anyway with
// "run"; the workflow ends failed.
func TestWorkflowRunsTasksAfterTheirDependencies(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, on(b), "")
	status, body := r.call(t, "POST", "/v1/workflows", `{"tasks": [
		{"name": "render", "queue": "echo", "payload": "r", "depends_on": ["fetch"]},
		{"name": "fetch", "queue": "echo", "payload": "f"},
		{"name": "publish", "queue": "echo", "payload": "p", "depends_on": ["render", "fetch"]},
		{"name": "mail", "queue": "mail", "payload": "m"},
		{"name": "after-mail", "queue": "echo", "depends_on": ["mail"]},
		{"name": "anyway", "queue": "echo", "depends_on": ["mail"], "on_dependency_failure": "run"}]}`)
	if status != 202 {
		t.Fatalf("POST /v1/workflows: %d %v", status, body)
	}
	id := body["id"].(string)
	tasks := body["tasks"].(map[string]any)
	wf := r.until(t, "/v1/workflows/"+id, "failed")
	states := map[string]string{}
	for _, task := range wf["tasks"].([]any) {
		m := task.(map[string]any)
		states[m["name"].(string)] = m["state"].(string)
	}
	want := map[string]string{"fetch": "succeeded", "render": "succeeded", "publish": "succeeded", "mail": "dead", "after-mail": "cancelled", "anyway": "succeeded"}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("task states %v, want %v", states, want)
	}
	ctx := context.Background()
	rec := func(name string) backend.JobRecord {
		rec, err := b.JobRecord(ctx, tasks[name].(string))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for _, pair := range [][2]string{{"fetch", "render"}, {"render", "publish"}, {"fetch", "publish"}, {"mail", "anyway"}} {
		if dep, task := rec(pair[0]), rec(pair[1]); !task.StartedAt.After(dep.FinishedAt) {
			t.Errorf("%s started at %v, before %s finished at %v", pair[1], task.StartedAt, pair[0], dep.FinishedAt)
		}
	}
	if reason := rec("after-mail").Reason; !strings.Contains(reason, tasks["mail"].(string)) {
		t.Errorf("after-mail's reason %q does not name the task that died", reason)
	}
	if status, page := r.call(t, "GET", "/v1/workflows", ""); status != 200 || len(page["workflows"].([]any)) != 1 {
		t.Fatalf("GET /v1/workflows: %d %v", status, page)
	}
}

// A workflow with a cycle, an unknown or a duplicate name is a 400 naming it, and
// nothing of it is stored.
func TestBadWorkflowsAreRefusedWhole(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, on(b), "")
	for _, tc := range []struct{ body, want string }{
		{`{"tasks": [{"name": "a", "queue": "echo", "depends_on": ["b"]}, {"name": "b", "queue": "echo", "depends_on": ["a"]}]}`, "cycle: a -> b -> a"},
		{`{"tasks": [{"name": "a", "queue": "echo", "depends_on": ["nope"]}]}`, `unknown task "nope"`},
		{`{"tasks": [{"name": "a", "queue": "echo"}, {"name": "a", "queue": "echo"}]}`, `duplicate name "a"`},
	} {
		status, body := r.call(t, "POST", "/v1/workflows", tc.body)
		if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %s: %d %v, want 400 with %q", tc.body, status, body, tc.want)
		}
	}
	if status, page := r.call(t, "GET", "/v1/workflows", ""); status != 200 || len(page["workflows"].([]any)) != 0 {
		t.Fatalf("GET /v1/workflows after refusals: %d %v", status, page)
	}
	if st, err := b.QueueStats(context.Background(), "echo"); err != nil || st.Pending+st.Waiting+st.Unacked != 0 {
		t.Fatalf("jobs left by refused workflows: %+v %v", st, err)
	}
}

// A batch runs on_complete once every job has ended and on_success only when all
// succeeded; its counts and callbacks are in GET, and a batch with a dead job cancels
// on_success and ends failed.
func TestBatchCallbacksWaitForEveryJob(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, on(b), "")
	status, body := r.call(t, "POST", "/v1/batches", `{"jobs": [{"queue": "echo", "payload": "1"}, {"queue": "echo", "payload": "2"}, {"queue": "echo", "payload": "3"}],
		"on_complete": {"queue": "echo", "payload": "complete"}, "on_success": {"queue": "echo", "payload": "success"}}`)
	if status != 202 || len(body["ids"].([]any)) != 3 {
		t.Fatalf("POST /v1/batches: %d %v", status, body)
	}
	ok := r.until(t, "/v1/batches/"+body["id"].(string), "succeeded")
	if ok["total"] != 3.0 || ok["succeeded"] != 3.0 || ok["pending"] != 0.0 {
		t.Fatalf("a batch that succeeded: %v", ok)
	}
	ctx := context.Background()
	callbacks := ok["callbacks"].(map[string]any)
	last := time.Time{}
	for _, id := range ok["ids"].([]any) {
		rec, _ := b.JobRecord(ctx, id.(string))
		if rec.FinishedAt.After(last) {
			last = rec.FinishedAt
		}
	}
	for role, id := range callbacks {
		deadline := time.Now().Add(30 * time.Second)
		for {
			rec, err := b.JobRecord(ctx, id.(string))
			if err == nil && rec.State == backend.JobSucceeded {
				if !rec.StartedAt.After(last) || len(rec.Attempts) != 1 {
					t.Errorf("%s started at %v (the last job ended at %v), %d runs", role, rec.StartedAt, last, len(rec.Attempts))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s callback: %+v %v", role, rec, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	status, body = r.call(t, "POST", "/v1/batches", `{"jobs": [{"queue": "echo"}, {"queue": "mail"}],
		"on_complete": {"queue": "echo"}, "on_success": {"queue": "echo"}}`)
	if status != 202 {
		t.Fatalf("POST /v1/batches: %d %v", status, body)
	}
	failed := r.until(t, "/v1/batches/"+body["id"].(string), "failed")
	if failed["dead"] != 1.0 || failed["succeeded"] != 1.0 || len(failed["unsucceeded"].([]any)) != 1 {
		t.Fatalf("a batch with a dead job: %v", failed)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, v := r.call(t, "GET", "/v1/batches/"+body["id"].(string), "")
		cs := v["callback_states"].(map[string]any)
		if cs["on_complete"] == "succeeded" && cs["on_success"] == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("callbacks of a failed batch: %v", cs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, page := r.call(t, "GET", "/v1/batches?limit=1", ""); status != 200 || len(page["batches"].([]any)) != 1 || page["next"] == "" {
		t.Fatalf("GET /v1/batches?limit=1: %d %v", status, page)
	}
}

// Cancelling a running workflow cancels what has not run: the state is cancelled and
// a task waiting for a delayed one never runs; an ended one is 409.
func TestCancelWorkflow(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, on(b), "")
	status, body := r.call(t, "POST", "/v1/workflows", `{"tasks": [{"name": "later", "queue": "echo", "delay": "1h"}, {"name": "then", "queue": "echo", "depends_on": ["later"]}]}`)
	if status != 202 {
		t.Fatalf("POST /v1/workflows: %d %v", status, body)
	}
	id := body["id"].(string)
	status, wf := r.call(t, "POST", "/v1/workflows/"+id+"/cancel", "")
	if status != 200 || wf["state"] != "cancelled" {
		t.Fatalf("cancel: %d %v", status, wf)
	}
	for _, task := range wf["tasks"].([]any) {
		if m := task.(map[string]any); m["state"] != "cancelled" {
			t.Errorf("task %v after the cancel", m)
		}
	}
	if status, body := r.call(t, "POST", "/v1/workflows/"+id+"/cancel", ""); status != 409 {
		t.Fatalf("second cancel: %d %v, want 409", status, body)
	}
}
