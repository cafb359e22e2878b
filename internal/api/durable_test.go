package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
)

// openPebble opens a pebble backend in a directory of the test's, closed with it.
func openPebble(t *testing.T, cfg pebble.Config) *pebble.Backend {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	b, err := pebble.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// On a backend with job records, GET /v1/jobs/{id} answers from the record: state,
// attempt, output, module, timestamps; a job it never had is 404.
func TestJobRecordsAnswerGetJob(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, b, nil, "")
	status, body := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload": "hi"}`)
	if status != 202 {
		t.Fatalf("enqueue: %d %v", status, body)
	}
	id := body["id"].(string)
	var job map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, job = r.call(t, "GET", "/v1/jobs/"+id, "")
		if status == 200 && job["state"] == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %d %v, want succeeded", id, status, job)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mod, _ := job["module"].(map[string]any)
	if job["output"] != "hi" || job["attempt"] != 1.0 || job["queue"] != "echo" || mod["name"] != "echo" || mod["version"] == "" ||
		job["started_at"] == nil || job["finished_at"] == nil || job["enqueued_at"] == nil {
		t.Fatalf("the record of job %s: %v", id, job)
	}
	rec, err := b.JobRecord(context.Background(), id)
	if err != nil || rec.State != backend.JobSucceeded {
		t.Fatalf("the backend's record: %+v %v", rec, err)
	}
	if status, body := r.call(t, "GET", "/v1/jobs/nope", ""); status != 404 || !strings.Contains(body["error"].(string), "job records") {
		t.Fatalf("GET an unknown job: %d %v", status, body)
	}
}

// On a backend that publishes batches in one write, a batch is accepted whole or not
// at all: under the disk's reserve it answers 503 naming the data directory, no id,
// and nothing of it is on disk.
func TestBatchIsAllOrNothingAndDiskFullIs503(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := openPebble(t, pebble.Config{Dir: dir, FreeSpaceReserve: 1 << 60, BallastSize: -1})
	r := newRigOn(t, b, nil, "")
	status, body := r.call(t, "POST", "/v1/jobs/batch", `{"jobs": [{"queue": "echo", "payload": "a"}, {"queue": "echo", "payload": "b", "delay": "1h"}]}`)
	msg, _ := body["error"].(string)
	if status != 503 || !strings.Contains(msg, dir) || !strings.Contains(msg, "none was accepted") || len(body["ids"].([]any)) != 0 {
		t.Fatalf("batch under the reserve: %d %v, want 503 naming %s with no id", status, body, dir)
	}
	status, body = r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload": "a"}`)
	if msg, _ := body["error"].(string); status != 503 || !strings.Contains(msg, dir) || !strings.Contains(msg, "disk") {
		t.Fatalf("enqueue under the reserve: %d %v, want 503 naming %s", status, body, dir)
	}
	st, err := b.QueueStats(context.Background(), "echo")
	if err != nil || st.Pending+st.Delayed+st.Unacked != 0 {
		t.Fatalf("after refused publishes: %+v %v, want nothing", st, err)
	}
}

// A batch on the pebble backend is accepted whole: every id, each job there.
func TestBatchIsOneWrite(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, b, nil, "")
	status, body := r.call(t, "POST", "/v1/jobs/batch", `{"jobs": [{"queue": "echo", "payload": "a", "delay": "1h"}, {"queue": "echo", "payload": "b", "delay": "1h"}]}`)
	if status != 202 || len(body["ids"].([]any)) != 2 {
		t.Fatalf("batch: %d %v", status, body)
	}
	for _, id := range body["ids"].([]any) {
		if status, job := r.call(t, "GET", "/v1/jobs/"+id.(string), ""); status != 200 || job["state"] != "delayed" {
			t.Fatalf("job %v of the batch: %d %v, want delayed", id, status, job)
		}
	}
}

// POST /v1/backup copies the running store into a new or empty directory, which opens
// with the jobs it held; a directory with files, a relative path and a backend with no
// store of its own are refused with the reason.
func TestBackup(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	r := newRigOn(t, b, nil, "")
	if status, body := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload": "later", "delay": "1h"}`); status != 202 {
		t.Fatalf("enqueue: %d %v", status, body)
	}
	empty := t.TempDir()
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	for _, c := range []struct {
		dir        string
		status     int
		wantInBody string
	}{
		{filepath.Join(t.TempDir(), "new"), 200, ""},
		{empty, 200, ""},
		{full, 409, "not empty"},
		{"relative/dir", 400, "absolute"},
	} {
		status, body := r.call(t, "POST", "/v1/backup", `{"dir": "`+c.dir+`"}`)
		if msg, _ := body["error"].(string); status != c.status || !strings.Contains(msg, c.wantInBody) {
			t.Errorf("backup into %s: %d %v, want %d %q", c.dir, status, body, c.status, c.wantInBody)
			continue
		}
		if status != 200 {
			continue
		}
		cp, err := pebble.Open(context.Background(), pebble.Config{Dir: c.dir})
		if err != nil {
			t.Fatalf("opening the backup in %s: %v", c.dir, err)
		}
		if rec := cp.Recovered(); rec.Delayed != 1 {
			t.Errorf("the backup in %s holds %+v, want the delayed job", c.dir, rec)
		}
		cp.Close(context.Background())
	}
	mem := newAPIRig(t, "")
	if status, body := mem.call(t, "POST", "/v1/backup", `{"dir": "/tmp/x"}`); status != 501 {
		t.Fatalf("backup on the memory backend: %d %v, want 501", status, body)
	}
}
