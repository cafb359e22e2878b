package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer is a log sink safe for the host's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// testHost is a Server on the memory backend (or a backend of the test's), serving on a
// loopback listener of its own, with its log kept.
type testHost struct {
	t    *testing.T
	srv  *Server
	url  string
	logs *logBuffer
	gate string // the directory the wait_file module's jobs wait in
}

// newTestHost builds a host whose modules directory holds the module "work", the
// testdata module wait_file: a job runs until the test creates the file its payload
// names in h.gate (release), or until the drain deadline ends it. cfg's Modules,
// Logger and Listener are set here; b nil means a memory backend.
func newTestHost(t *testing.T, b backend.Backend, cfg Config) *testHost {
	t.Helper()
	dir, gate := t.TempDir(), t.TempDir()
	wasm, err := os.ReadFile("../testdata/abi/wait_file.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf("max_attempts = 1\ntimeout = \"1h\"\ndirs = [%q]\n", gate+":/gate")
	if err := os.WriteFile(filepath.Join(dir, "work.toml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if b == nil {
		b = memory.New(memory.Config{})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{t: t, url: "http://" + ln.Addr().String(), logs: &logBuffer{}, gate: gate}
	cfg.Modules, cfg.Listener, cfg.CacheDir = dir, ln, t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.srv, err = New(b, cfg)
	if err != nil {
		ln.Close()
		b.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.srv.Stop(context.Background()) // ErrStopped when the test stopped it
		if t.Failed() {
			t.Logf("host log:\n%s", h.logs)
		}
	})
	return h
}

// start starts the host.
func (h *testHost) start() {
	h.t.Helper()
	if err := h.srv.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// call sends a request to the host's listener and decodes a JSON answer into out (when
// not nil); it returns the status, 0 when the listener did not answer.
func (h *testHost) call(method, path, body string, out any) int {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// enqueue enqueues a job of "work" that waits for the file name, and returns its id.
func (h *testHost) enqueue(name string) string {
	h.t.Helper()
	var acc struct{ ID string }
	if status := h.call("POST", "/v1/jobs", fmt.Sprintf(`{"queue": "work", "payload": %q}`, name), &acc); status != 202 {
		h.t.Fatalf("enqueue: %d", status)
	}
	return acc.ID
}

// state is the job's state as the API reports it.
func (h *testHost) state(id string) string {
	var st struct{ State string }
	h.call("GET", "/v1/jobs/"+id, "", &st)
	return st.State
}

// release lets the jobs waiting for the file name finish.
func (h *testHost) release(name string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.gate, name), nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// waitFor polls cond every 10 ms for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// serveRecorded sends a request straight to s's Handler and returns the status.
func serveRecorded(s *Server, method, path string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, nil)
	req.Host = "127.0.0.1" // the listener is on loopback: the API checks the Host
	s.Handler().ServeHTTP(rec, req)
	return rec.Code
}
