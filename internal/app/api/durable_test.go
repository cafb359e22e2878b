package api_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
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
	r := newRigOn(t, on(b), "")
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
	r := newRigOn(t, on(b), "")
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
	r := newRigOn(t, on(b), "")
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

// POST /v1/backup copies the running store into a new directory of the given name
// under the host's backup root, which opens with the jobs it held. A name that would
// leave the root (traversal, separators, absolute), a symbolic link planted at the
// name, an existing name, a host with no backup root and a backend with no store of
// its own are refused with the reason, and nothing outside the root is made or removed.
func TestBackup(t *testing.T) {
	t.Parallel()
	b := openPebble(t, pebble.Config{})
	root := t.TempDir()
	r := newRigOn(t, on(b), "", func(c *rigConfig) { c.BackupDir = root })
	if status, body := r.call(t, "POST", "/v1/jobs", `{"queue": "echo", "payload": "later", "delay": "1h"}`); status != 202 {
		t.Fatalf("enqueue: %d %v", status, body)
	}
	outside := t.TempDir()
	emptyOutside := filepath.Join(outside, "empty")
	os.Mkdir(emptyOutside, 0o755)
	if err := os.Symlink(emptyOutside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "taken"), 0o755)
	for _, c := range []struct {
		name       string
		status     int
		wantInBody string
	}{
		{"nightly", 200, ""},
		{"nightly", 409, "exists"},
		{"taken", 409, "exists"},
		{"link", 409, "exists"},
		{"../escaped", 400, "one plain name"},
		{"a/b", 400, "one plain name"},
		{outside + "/x", 400, "one plain name"},
		{"..", 400, "one plain name"},
		{".tmp-x", 400, "one plain name"},
		{"", 400, "empty"},
	} {
		status, body := r.call(t, "POST", "/v1/backup", `{"name": "`+c.name+`"}`)
		if msg, _ := body["error"].(string); status != c.status || !strings.Contains(msg, c.wantInBody) {
			t.Errorf("backup %q: %d %v, want %d %q", c.name, status, body, c.status, c.wantInBody)
			continue
		}
		if status != 200 {
			continue
		}
		dir := filepath.Join(root, c.name)
		if body["dir"] != dir {
			t.Errorf("backup %q: dir %v, want %s", c.name, body["dir"], dir)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("backup %q: %v %v, want a directory of mode 0700", c.name, fi, err)
		}
		cp, err := pebble.Open(context.Background(), pebble.Config{Dir: dir})
		if err != nil {
			t.Fatalf("opening the backup in %s: %v", dir, err)
		}
		if rec := cp.Recovered(); rec.Delayed != 1 {
			t.Errorf("the backup in %s holds %+v, want the delayed job", dir, rec)
		}
		cp.Close(context.Background())
	}
	// The link and its target are as they were, and nothing else was left in the root
	// or outside it.
	if fi, err := os.Lstat(filepath.Join(root, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symbolic link in the root: %v %v, want it untouched", fi, err)
	}
	if entries, err := os.ReadDir(emptyOutside); err != nil || len(entries) != 0 {
		t.Errorf("the link's target outside the root: %v %v, want it there and empty", entries, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside the root: %v, want only the link's target", entries)
	}
	var names []string
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"link", "nightly", "taken"}; !slices.Equal(names, want) {
		t.Errorf("the backup root holds %v, want %v (no temporary directory left)", names, want)
	}

	off := newRigOn(t, on(openPebble(t, pebble.Config{})), "")
	if status, body := off.call(t, "POST", "/v1/backup", `{"name": "x"}`); status != 501 || !strings.Contains(body["error"].(string), "--backup-dir") {
		t.Errorf("backup with no backup root: %d %v, want 501 naming --backup-dir", status, body)
	}
	mem := newAPIRig(t, "", func(c *rigConfig) { c.BackupDir = root })
	if status, body := mem.call(t, "POST", "/v1/backup", `{"name": "x"}`); status != 501 {
		t.Errorf("backup on the memory backend: %d %v, want 501", status, body)
	}
	draining := newRigOn(t, on(openPebble(t, pebble.Config{})), "", func(c *rigConfig) {
		c.BackupDir = root
		c.Ready = func() bool { return false }
	})
	if status, body := draining.call(t, "POST", "/v1/backup", `{"name": "late"}`); status != 503 || !strings.Contains(body["error"].(string), "draining") {
		t.Errorf("backup while draining: %d %v, want 503", status, body)
	}
}

// A directory of the backup's name made by another process after the existence check,
// just before the backup is moved into place, is neither replaced nor entered: the
// backup fails naming it, and leaves no temporary directory.
func TestBackupDoesNotReplaceATargetMadeMeanwhile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	r := newRigOn(t, on(openPebble(t, pebble.Config{})), "", func(c *rigConfig) { c.BackupDir = root })
	var made os.FileInfo
	api.SetBeforeBackupRename(func(dir, name string) {
		if dir != root { // another test's backup
			return
		}
		target := filepath.Join(dir, name)
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Error(err)
		}
		made, _ = os.Stat(target)
	})
	t.Cleanup(func() { api.SetBeforeBackupRename(nil) })
	status, body := r.call(t, "POST", "/v1/backup", `{"name": "nightly"}`)
	if msg, _ := body["error"].(string); status != 409 || !strings.Contains(msg, `"nightly"`) || !strings.Contains(msg, "exists") {
		t.Errorf("backup onto a directory made meanwhile: %d %v, want 409 naming it", status, body)
	}
	target := filepath.Join(root, "nightly")
	now, err := os.Stat(target)
	if err != nil || made == nil || !os.SameFile(made, now) {
		t.Errorf("the directory made meanwhile: %v %v, want it where it was", now, err)
	}
	if entries, err := os.ReadDir(target); err != nil || len(entries) != 0 {
		t.Errorf("the directory made meanwhile holds %v %v, want it empty as it was made", entries, err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("the backup root holds %v, want only the directory made meanwhile", entries)
	}
}

// onBothBackends runs test in parallel on the API over each backend that keeps keys
// and acts on one job: memory, and pebble with its job records.
func onBothBackends(t *testing.T, test func(t *testing.T, r *apiRig)) {
	for name, rig := range map[string]func(t *testing.T) *apiRig{
		"memory": func(t *testing.T) *apiRig { return newAPIRig(t, "") },
		"pebble": func(t *testing.T) *apiRig { return newRigOn(t, on(openPebble(t, pebble.Config{})), "") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, rig(t))
		})
	}
}
