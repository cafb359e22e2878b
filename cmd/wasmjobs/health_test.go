package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
)

// TestFailedStoreStopsTheHost: once the pebble store fails for good (here a write of
// its log meets ENOSPC), run stops calling itself ready and healthy (503 on /readyz
// and /healthz, while a running job holds the drain open), logs the failure at error
// level, drains and returns an error wrapping ErrStoreFailed, instead of answering
// 200 to probes while every enqueue and settle fails.
func TestFailedStoreStopsTheHost(t *testing.T) {
	t.Parallel()
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})}
	dir := t.TempDir()
	installModule(t, dir, "abi/sleep_ms", "work", "1")
	f := &runFlags{modules: dir, backend: "pebble", concurrency: 2, listen: "127.0.0.1:0",
		drainTimeout: 10 * time.Second, logFormat: "text", logLevel: "info", history: 10,
		open: func(ctx context.Context, _ backendSpec, log *slog.Logger) (backend.Backend, error) {
			return pebble.Open(ctx, pebble.Config{Dir: "/data", FS: errorfs.Wrap(vfs.NewMem(), full), Logger: log})
		}}
	p := serveInProcess(f, t.TempDir(), make(chan os.Signal), func() {})
	p.waitServing(t)
	logs := p.logs
	url := "http://" + regexp.MustCompile(`api=http://(\S+)`).FindStringSubmatch(logs.String())[1]
	call := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if status, _ := call("GET", "/healthz", ""); status != 200 {
		t.Fatalf("/healthz before the failure: %d", status)
	}
	// A job of 4 s holds the drain open while the probes are read.
	status, body := call("POST", "/v1/jobs", `{"queue": "work", "payload": "4000"}`)
	if status != 202 {
		t.Fatalf("enqueue: %d %v", status, body)
	}
	id := body["id"].(string)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, job := call("GET", "/v1/jobs/"+id, ""); job["state"] == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	full.On()
	if status, body := call("POST", "/v1/jobs", `{"queue": "work", "payload": "1"}`); status != 503 {
		t.Fatalf("enqueue on a full log: %d %v, want 503", status, body)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		h, _ := call("GET", "/healthz", "")
		r, _ := call("GET", "/readyz", "")
		if h == 503 && r == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz %d, /readyz %d 5 s after the store failed, want 503:\n%s", h, r, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.result(t, 30*time.Second); !errors.Is(err, pebble.ErrStoreFailed) {
		t.Fatalf("run: %v, want ErrStoreFailed\n%s", err, logs)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="the backend's store failed`) {
		t.Fatalf("no error logged for the failed store:\n%s", logs)
	}
}
