package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// post sends a JSON body to the host and returns the status and the answer.
func (h *hostProc) post(path, body string) (int, string) {
	h.t.Helper()
	return h.send("POST", path, body, "Content-Type", "application/json")
}

// TestEnqueueDuringTheDrainIsRefused runs the real binary on the memory backend:
// SIGTERM while a slow job runs; from then on every enqueue answers 503 and says the
// host is draining, reads still answer, and the host exits having lost no job it
// answered 202 for.
func TestEnqueueDuringTheDrainIsRefused(t *testing.T) {
	t.Parallel()
	// The running job waits for a file the test creates once its checks during the
	// drain are done (abi/wait_file): it outlasts them however slow the machine.
	dir, gate := t.TempDir(), t.TempDir()
	installModule(t, dir, "abi/wait_file", "work", "v1")
	if err := os.WriteFile(filepath.Join(dir, "work.toml"), fmt.Appendf(nil, "max_attempts = 1\ntimeout = \"1h\"\ndirs = [%q]\n", gate+":/gate"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, dir, "--backend", "memory", "--drain-timeout", "1h")

	status, body := h.post("/v1/jobs", `{"queue": "work", "payload": "go"}`)
	var acc struct{ ID string }
	if status != 202 || json.Unmarshal([]byte(body), &acc) != nil {
		t.Fatalf("enqueue: %d %s", status, body)
	}
	var st jobState
	waitFor(t, "the slow job to start", func() bool { h.get("/v1/jobs/"+acc.ID, &st); return st.State == "running" })
	h.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "readyz to say 503", func() bool { return h.get("/readyz", nil) == 503 })

	accepted := []string{acc.ID}
	for _, tc := range []struct{ path, body string }{
		{"/v1/jobs", `{"queue": "work", "payload": "1"}`},
		{"/v1/jobs/batch", `{"jobs": [{"queue": "work", "payload": "1"}]}`},
	} {
		status, body := h.post(tc.path, tc.body)
		if status == 202 {
			accepted = append(accepted, body)
		}
		if status != 503 || !strings.Contains(body, "the host is draining") {
			t.Errorf("POST %s during the drain: %d %s, want 503 saying the host is draining", tc.path, status, body)
		}
	}
	r := wasmjobs(t, "", "enqueue", "work", "1", "--server", h.url)
	if r.code != 1 || !strings.Contains(r.stderr, "server answered 503: the host is draining") {
		t.Errorf("enqueue during the drain: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if code := h.get("/v1/jobs/"+acc.ID, &st); code != 200 || st.State != "running" {
		t.Fatalf("GET the running job during the drain: %d %+v", code, st)
	}
	if code := h.get("/v1/queues", nil); code != 200 {
		t.Fatalf("GET /v1/queues during the drain: %d", code)
	}
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := h.exited(time.Minute); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	log := h.log()
	settled := regexp.MustCompile(`msg="job settled" .*job=(\S+)`).FindAllStringSubmatch(log, -1)
	if len(settled) != len(accepted) || settled[0][1] != acc.ID || strings.Contains(log, "dropped at exit") {
		t.Fatalf("accepted %v; settled %v; every job answered 202 must settle and none be dropped", accepted, settled)
	}
}
