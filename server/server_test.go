package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/inspect"
)

// TestStopDrainsARunningJob: from Stop's start the host is not ready and refuses new
// jobs (the memory backend would drop them), still answers reads over its listener
// while a job runs, and returns once that job finished and settled.
func TestStopDrainsARunningJob(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, Config{DrainTimeout: time.Hour})
	h.start()
	if status := h.call("GET", "/readyz", "", nil); status != 200 {
		t.Fatalf("/readyz once started: %d", status)
	}
	id := h.enqueue("go")
	waitFor(t, "the job to run", func() bool { return h.state(id) == "running" })

	stopped := make(chan error, 1)
	go func() { stopped <- h.srv.Stop(context.Background()) }()
	waitFor(t, "/readyz to say 503", func() bool { return h.call("GET", "/readyz", "", nil) == 503 })
	if status := h.call("POST", "/v1/jobs", `{"queue": "work", "payload": "other"}`, nil); status != 503 {
		t.Errorf("enqueue during the drain: %d, want 503", status)
	}
	if got := h.state(id); got != "running" {
		t.Errorf("the running job during the drain: %q, want running (reads answer until the end)", got)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned with a job running and an hour of drain left: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	h.release("go")
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return after the job finished")
	}
	if log := h.logs.String(); !strings.Contains(log, `msg="job settled"`) || !strings.Contains(log, "drained: every running job finished and settled") ||
		!strings.Contains(log, "wasmjobs stopped") {
		t.Fatalf("the job did not settle in the drain:\n%s", log)
	}
	if status := h.call("GET", "/readyz", "", nil); status != 0 {
		t.Errorf("the listener still answers after Stop: %d", status)
	}
}

// TestStopAtTheDrainDeadline: a job still running at the drain deadline is left
// unacknowledged, and Stop returns within the deadline plus CloseGrace.
func TestStopAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	const drain = 300 * time.Millisecond
	h := newTestHost(t, nil, Config{DrainTimeout: drain})
	h.start()
	id := h.enqueue("never")
	waitFor(t, "the job to run", func() bool { return h.state(id) == "running" })
	start := time.Now()
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop at the drain deadline: %v, want nil", err)
	}
	if took := time.Since(start); took > drain+CloseGrace {
		t.Errorf("Stop took %v, past the drain timeout %v plus CloseGrace", took, drain)
	}
	log := h.logs.String()
	if !strings.Contains(log, "drain timeout: unfinished jobs left unacknowledged") || strings.Contains(log, `msg="job settled"`) {
		t.Fatalf("want the job left unacknowledged, not settled:\n%s", log)
	}
}

// TestStartThenStop: a host with nothing running stops at once; the lifecycle's
// misuses answer with its sentinel errors.
func TestStartThenStop(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, Config{})
	h.start()
	if err := h.srv.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("a second Start: %v, want ErrStarted", err)
	}
	start := time.Now()
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > CloseGrace {
		t.Errorf("Stop with nothing running took %v", took)
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("a second Stop: %v, want ErrStopped", err)
	}
	if err := h.srv.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop: %v, want ErrStopped", err)
	}
}

// TestStopBeforeStart: a host never started is not ready, and Stop releases what New
// built, the backend and the listener included.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	h := newTestHost(t, b, Config{})
	if rec := serveRecorded(h.srv, "GET", "/readyz"); rec != 503 {
		t.Errorf("/readyz before Start: %d, want 503", rec)
	}
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := b.Publish(context.Background(), backend.NewEnvelope("work", nil), 0); !errors.Is(err, backend.ErrShutDown) {
		t.Errorf("Publish after Stop: %v, want the backend closed (ErrShutDown)", err)
	}
	if status := h.call("GET", "/readyz", "", nil); status != 0 {
		t.Errorf("the listener answers after Stop: %d", status)
	}
	if err := h.srv.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop: %v, want ErrStopped", err)
	}
}

// TestStartGivesUpWithItsContext: a Start whose context ended fails with its error
// (what `run` takes for a signal during the start), and Stop still releases the host.
func TestStartGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.srv.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start on an ended context: %v, want context.Canceled", err)
	}
	if status := serveRecorded(h.srv, "GET", "/readyz"); status != 503 {
		t.Errorf("/readyz after a Start that gave up: %d, want 503", status)
	}
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a Start that gave up: %v", err)
	}
}

// failingStore is a memory backend whose store breaks when the test says so.
type failingStore struct {
	*memory.Backend
	broken atomic.Bool
}

var errBroken = errors.New("the disk is full")

func (f *failingStore) Err() error {
	if f.broken.Load() {
		return errBroken
	}
	return nil
}

// TestFailedStoreStops: once the backend reports its store broken, the host is
// neither healthy nor ready, closes Done, and Stop drains and returns the failure.
func TestFailedStoreStops(t *testing.T) {
	t.Parallel()
	b := &failingStore{Backend: memory.New(memory.Config{})}
	h := newTestHost(t, b, Config{})
	h.start()
	if status := h.call("GET", "/healthz", "", nil); status != 200 {
		t.Fatalf("/healthz before the failure: %d", status)
	}
	b.broken.Store(true)
	select {
	case <-h.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the store failed")
	}
	if hz, rz := h.call("GET", "/healthz", "", nil), h.call("GET", "/readyz", "", nil); hz != 503 || rz != 503 {
		t.Errorf("/healthz %d, /readyz %d after the store failed, want 503", hz, rz)
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, errBroken) {
		t.Fatalf("Stop: %v, want the store's failure", err)
	}
	if !strings.Contains(h.logs.String(), `level=ERROR msg="the backend's store failed`) {
		t.Errorf("no error logged for the failed store:\n%s", h.logs)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hostLog is a host's log, in a file of the test's: the file takes the host's
// goroutines' writes, and String reads what they wrote so far.
type hostLog struct{ path string }

func (l hostLog) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// testHost is a Server on the memory backend (or a backend of the test's), serving on a
// loopback listener of its own, with its log kept.
type testHost struct {
	t    *testing.T
	srv  *Server
	url  string
	logs hostLog
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
	h := &testHost{t: t, url: "http://" + ln.Addr().String(), logs: hostLog{filepath.Join(t.TempDir(), "log")}, gate: gate}
	logFile, err := os.Create(h.logs.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cfg.Modules, cfg.Listener, cfg.CacheDir = dir, ln, t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
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

// An upload is checked without running its code: a module that traps in _initialize
// (which Load, running it, refuses) passes the check; one without the ABI marker does not.
func TestUploadValidatorRunsNoGuestCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := host.NewEngine(ctx, host.Config{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	validate := uploadValidator(e)
	trap, err := os.ReadFile("../testdata/hostile/init_trap.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := validate(ctx, "init_trap", trap); err != nil || v != host.Version(trap) {
		t.Errorf("validating a module whose _initialize traps: %q, %v; want its version (its code must not run)", v, err)
	}
	bad, err := os.ReadFile("../testdata/hostile/no_marker.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := validate(ctx, "no_marker", bad); !errors.Is(err, host.ErrInvalidModule) {
		t.Errorf("validating a module without the ABI marker: %v, want ErrInvalidModule", err)
	}
}

// TestBusyGuessIsBounded checks overlap "skip" without job records: a job this host
// only published, in a queue that is not empty, holds off the one tick after its own
// and no more (the queue may never empty on a busy multi-host queue).
func TestBusyGuessIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)
	q := backend.QueueConfig{Name: "q", Prefetch: 1}
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, backend.NewEnvelope("q", []byte("other")), 0); err != nil {
		t.Fatal(err) // the queue is not empty
	}
	hist := inspect.NewRecords(10)
	busy := busyFunc(b, hist)
	const period = time.Minute
	for _, tc := range []struct {
		name string
		ago  time.Duration // of the previous tick
		want bool
	}{
		{"the next tick", period + time.Second, true},
		{"the tick after", 2*period + time.Second, false},
		{"hours later", 3 * time.Hour, false},
	} {
		prev := time.Now().Add(-tc.ago).Truncate(time.Second)
		id := backend.ScheduleID("m/s", prev)
		hist.Enqueued(backend.Envelope{ID: id, Queue: "q", Attempt: 1, EnqueuedAt: prev}, false)
		got, err := busy(ctx, id, prev, period)
		if err != nil || got != tc.want {
			t.Errorf("%s: busy %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// pruningStore is a schedule store that forgets schedules, as the RabbitMQ lease does.
type pruningStore struct {
	backend.ScheduleStore
	kept []string
}

func (p *pruningStore) KeepSchedules(schedules []string) { p.kept = schedules }

// TestHistoryStorePassesTheScheduleSetOn: the scheduler tells a pruning store (the
// RabbitMQ lease) which schedules exist through the historyStore around it, whose
// embedded interface would otherwise hide KeepSchedules: the token then kept a removed
// schedule's tick for ever.
func TestHistoryStorePassesTheScheduleSetOn(t *testing.T) {
	t.Parallel()
	inner := &pruningStore{}
	var store backend.ScheduleStore = historyStore{ScheduleStore: inner}
	p, ok := store.(backend.SchedulePruner)
	if !ok {
		t.Fatal("the historyStore around a pruning store is no backend.SchedulePruner")
	}
	p.KeepSchedules([]string{"m/a"})
	if !slices.Equal(inner.kept, []string{"m/a"}) {
		t.Fatalf("the store was told to keep %v, want [m/a]", inner.kept)
	}
}
