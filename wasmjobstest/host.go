package wasmjobstest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/server"
)

// DefaultWait is how long Host.AddModule, Host.Start and Host.WaitState wait when
// HostConfig.Wait is 0: long enough for a loaded machine to compile a module.
const DefaultWait = 20 * time.Second

// requestTimeout bounds one request of the rig to the host's API.
const requestTimeout = 10 * time.Second

// pollEvery is how often the waits ask the API again.
const pollEvery = 10 * time.Millisecond

// HostConfig configures NewHost. Its zero value is a started host on a fresh memory
// backend with an empty modules directory.
type HostConfig struct {
	// Server is the server's configuration. The rig fills in what it leaves empty:
	// Modules, a temporary directory; CacheDir, another (no compilation is shared
	// with other runs); Logger, a text log at the debug level that Host.Log returns;
	// Listener, a loopback listener the server serves on. TLS is not for the rig: its
	// requests are plain HTTP. A Token set here is sent with every request of the rig.
	Server server.Config
	// Backend is the backend the host runs on; nil means memory.New(memory.Config{}).
	// From NewHost on it is the host's: its Stop closes it.
	Backend backend.Backend
	// Wait bounds each wait of the rig (a module to serve, a job to reach a state);
	// DefaultWait if 0.
	Wait time.Duration
	// NoStart leaves the host built and not started, for a test of the start itself:
	// call Host.Start, or Start on Host.Server.
	NoStart bool
}

// Host is a wasmjobs host for one test: a server.Server, its modules directory and
// its API's address. The test's cleanup stops it.
type Host struct {
	t       testing.TB
	srv     *server.Server
	b       backend.Backend
	modules string
	url     string
	token   string
	wait    time.Duration
	logPath string // the rig's log file; empty when the test gave a Logger of its own
	client  *http.Client

	mu      sync.Mutex
	started bool
	added   map[string]string // module name → the version AddModule wrote
}

// NewHost builds a host with cfg and, unless cfg.NoStart, starts it (Host.Start).
// The test's cleanup stops it and fails the test when Stop returns an error (other
// than server.ErrStopped, for a host the test stopped itself); a failed test gets
// the host's log in its output.
func NewHost(t testing.TB, cfg HostConfig) *Host {
	t.Helper()
	sc := cfg.Server
	if sc.Modules == "" {
		sc.Modules = t.TempDir()
	}
	if sc.CacheDir == "" {
		sc.CacheDir = t.TempDir()
	}
	h := &Host{t: t, modules: sc.Modules, token: sc.Token, wait: cmp.Or(cfg.Wait, DefaultWait),
		client: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{}}, added: map[string]string{}}
	b := cfg.Backend
	if b == nil {
		b = memory.New(memory.Config{})
	}
	h.b = b
	if sc.Logger == nil { // a file: the host's goroutines write it while the test reads it
		h.logPath = filepath.Join(t.TempDir(), "host.log")
		logFile, err := os.Create(h.logPath)
		if err != nil {
			b.Close(context.Background())
			t.Fatalf("wasmjobstest: the host's log: %v", err)
		}
		t.Cleanup(func() { logFile.Close() }) // after the host's stop, registered later
		sc.Logger = slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if sc.Listener == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Close(context.Background())
			t.Fatalf("wasmjobstest: a loopback listener for the host: %v", err)
		}
		sc.Listener = ln
	}
	h.url = "http://" + sc.Listener.Addr().String()
	srv, err := server.New(b, sc)
	if err != nil {
		sc.Listener.Close()
		b.Close(context.Background())
		t.Fatalf("wasmjobstest: building the host: %v", err)
	}
	h.srv = srv
	t.Cleanup(h.cleanup)
	if !cfg.NoStart {
		h.Start()
	}
	return h
}

// cleanup stops the host, then checks how it stopped.
func (h *Host) cleanup() {
	// Stop returns within the drain timeout plus server.CloseGrace, whatever runs.
	if err := h.srv.Stop(context.Background()); err != nil && !errors.Is(err, server.ErrStopped) {
		h.t.Errorf("wasmjobstest: stopping the host: %v", err)
	}
	h.client.CloseIdleConnections() // the rig's own transport: no connection outlives the test
	if h.t.Failed() && h.logPath != "" {
		h.t.Logf("the host's log:\n%s", h.Log())
	}
}

// Start starts the host and waits until every module AddModule wrote before serves.
func (h *Host) Start() {
	h.t.Helper()
	if err := h.srv.Start(h.t.Context()); err != nil {
		h.t.Fatalf("wasmjobstest: starting the host: %v", err)
	}
	h.mu.Lock()
	h.started = true
	added := make(map[string]string, len(h.added))
	for name, v := range h.added {
		added[name] = v
	}
	h.mu.Unlock()
	for name, v := range added {
		h.waitServing(name, v)
	}
}

// Server is the host's server, for what the rig does not do: the test may Stop it
// itself (the cleanup then finds it stopped).
func (h *Host) Server() *server.Server { return h.srv }

// Backend is the backend the host runs on.
func (h *Host) Backend() backend.Backend { return h.b }

// ModulesDir is the host's modules directory.
func (h *Host) ModulesDir() string { return h.modules }

// URL is the address of the host's API and dashboard: http://127.0.0.1:port on the
// rig's own listener; on one that HostConfig.Server gave, http:// and its address.
func (h *Host) URL() string { return h.url }

// Log is what the host logged so far (the rig's log: empty when HostConfig.Server
// gave a Logger).
func (h *Host) Log() string {
	if h.logPath == "" {
		return ""
	}
	b, err := os.ReadFile(h.logPath)
	if err != nil {
		return fmt.Sprintf("(the host's log: %v)", err)
	}
	return string(b)
}

// AddModule writes the module name (NAME.wasm, and its manifest NAME.toml when
// manifest is not empty; an empty one removes a NAME.toml left from before) into the
// modules directory and, on a started host, waits until that version serves (or is
// on trial as a canary). The module serves the queue name unless its manifest names
// another. The test fails when the version does not serve within the wait, with what
// the host last said of the module (a rejection's reason).
func (h *Host) AddModule(name string, wasm []byte, manifest string) {
	h.t.Helper()
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		h.t.Fatalf("wasmjobstest: module name %q: want a file name without a path or a leading dot", name)
	}
	toml := filepath.Join(h.modules, name+".toml")
	if manifest != "" {
		h.writeFile(toml, []byte(manifest))
	} else if err := os.Remove(toml); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.t.Fatalf("wasmjobstest: removing the old manifest of %s: %v", name, err)
	}
	h.writeFile(filepath.Join(h.modules, name+".wasm"), wasm)
	version := host.VersionOf(wasm, []byte(manifest))
	h.mu.Lock()
	h.added[name] = version
	started := h.started
	h.mu.Unlock()
	if started || h.ready() {
		h.waitServing(name, version)
	}
}

// writeFile writes data to path whole: into a hidden file of the same directory (the
// registry passes over hidden files) renamed onto path, so that the directory's
// watch never reads half a module.
func (h *Host) writeFile(path string, data []byte) {
	h.t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		h.t.Fatalf("wasmjobstest: writing %s: %v", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		h.t.Fatalf("wasmjobstest: writing %s: %v", path, err)
	}
}

// moduleStatus is what the rig reads of a module in GET /v1/modules.
type moduleStatus struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Status  string `json:"status"`
	Error   string `json:"error"`
	Canary  *struct {
		Version string `json:"version"`
	} `json:"canary"`
}

// waitServing waits until version serves as the module name.
func (h *Host) waitServing(name, version string) {
	h.t.Helper()
	last := "not listed"
	h.poll(func() bool {
		var mods struct{ Modules []moduleStatus }
		status, body := h.request("GET", "/v1/modules", "")
		if status != http.StatusOK || json.Unmarshal(body, &mods) != nil {
			last = answer(status, body)
			return false
		}
		last = "not listed"
		for _, m := range mods.Modules {
			if m.Name != name {
				continue
			}
			if m.Status == "serving" && (m.Version == version || m.Canary != nil && m.Canary.Version == version) {
				return true
			}
			last = fmt.Sprintf("%s, version %.12s", m.Status, m.Version)
			if m.Error != "" {
				last += ": " + m.Error
			}
		}
		return false
	}, func() {
		h.t.Helper()
		h.t.Fatalf("wasmjobstest: module %s version %.12s did not serve within %v; the host last said: %s", name, version, h.wait, last)
	})
}

// Job is a job as the host's API reports it (GET /v1/jobs/{id}), in part.
type Job struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// State is pending, delayed (on a backend with job records), running, succeeded,
	// retrying, deferred, dead or cancelled.
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
	// Reason is why the last attempt did not succeed, when it did not.
	Reason string `json:"reason"`
	// Output is what the handler wrote as its output.
	Output string `json:"output"`
}

// Enqueue enqueues a job with payload on queue through server.Server.Enqueue, under
// the rules POST /v1/jobs applies, and returns its id. The test fails when the host
// refuses it, with the host's error.
func (h *Host) Enqueue(queue string, payload []byte) string {
	h.t.Helper()
	res, err := h.srv.Enqueue(h.t.Context(), server.Job{Queue: queue, Payload: payload})
	if err != nil {
		h.t.Fatalf("wasmjobstest: enqueue on queue %q: %v", queue, err)
	}
	return res.IDs[0]
}

// Job returns the job id as the host's API reports it now. The test fails when the
// API does not know it.
func (h *Host) Job(id string) Job {
	h.t.Helper()
	job, ok, last := h.job(id)
	if !ok {
		h.t.Fatalf("wasmjobstest: job %s: %s", id, last)
	}
	return job
}

// job reads the job id; when it cannot, it says what it got instead.
func (h *Host) job(id string) (Job, bool, string) {
	status, body := h.request("GET", "/v1/jobs/"+id, "")
	var job Job
	if status != http.StatusOK || json.Unmarshal(body, &job) != nil {
		return Job{}, false, answer(status, body)
	}
	return job, true, ""
}

// finished are the states a job leaves only by an operator's action.
var finished = map[string]bool{"succeeded": true, "dead": true, "cancelled": true}

// WaitState waits until the job id is in state (see Job.State) and returns it. The
// test fails at the end of the wait, or as soon as the job has finished in another
// state (succeeded, dead or cancelled), with the state the rig last saw and the last
// attempt's reason.
func (h *Host) WaitState(id, state string) Job {
	h.t.Helper()
	var last Job
	seen := "no answer yet"
	h.poll(func() bool {
		h.t.Helper()
		job, ok, got := h.job(id)
		if !ok {
			seen = got
			return false
		}
		last, seen = job, fmt.Sprintf("state %q, attempt %d", job.State, job.Attempt)
		if job.Reason != "" {
			seen += fmt.Sprintf(", reason %q", job.Reason)
		}
		if job.State != state && finished[job.State] {
			h.t.Fatalf("wasmjobstest: job %s finished %s, want %s: %s", id, job.State, state, seen)
		}
		return job.State == state
	}, func() {
		h.t.Helper()
		h.t.Fatalf("wasmjobstest: job %s not %s within %v; last seen: %s", id, state, h.wait, seen)
	})
	return last
}

// ready reports whether the server says it is ready, as a host the test started itself
// (Start on Host.Server) does: asked of its Handler, in the process, since a listener
// not yet served would leave a request over the network hanging.
func (h *Host) ready() bool {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/readyz", nil)
	req.Host = "127.0.0.1"
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	h.srv.Handler().ServeHTTP(rec, req)
	return rec.Code == http.StatusOK
}

// Call sends a request to the host's API (the rig's token with it) and, when out is
// not nil, decodes the JSON answer into it. It returns the status, 0 when the host
// did not answer (it stopped). body, when not empty, is sent as JSON.
func (h *Host) Call(method, path, body string, out any) int {
	h.t.Helper()
	status, resp := h.request(method, path, body)
	if out != nil && status != 0 {
		if err := json.Unmarshal(resp, out); err != nil {
			h.t.Fatalf("wasmjobstest: %s %s: decoding the answer: %v: %s", method, path, err, answer(status, resp))
		}
	}
	return status
}

// request sends a request to the host's API and returns the status and the body;
// status 0 when the host did not answer.
func (h *Host) request(method, path, body string) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatalf("wasmjobstest: %s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, data
}

// answer says what a request got, for a failure's message.
func answer(status int, body []byte) string {
	if status == 0 {
		return "no answer: " + string(body)
	}
	return fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(body))
}

// poll calls done every pollEvery until it reports true, or calls fail at the end of
// the host's wait (or of the test's context).
func (h *Host) poll(done func() bool, fail func()) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), h.wait)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			if done() { // a last look: the end of the wait may have hidden the answer
				return
			}
			fail()
			return
		case <-tick.C:
		}
	}
}
