package server_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/server"
	"github.com/wasmjobs/wasmjobs/wasmjobstest"
)

// TestStopDrainsARunningJob: from Stop's start the host is not ready and refuses new
// jobs (the memory backend would drop them), still answers reads over its listener
// while a job runs, and returns once that job finished and settled.
func TestStopDrainsARunningJob(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, server.Config{DrainTimeout: time.Hour})
	h.Start()
	if status := h.Call("GET", "/readyz", "", nil); status != 200 {
		t.Fatalf("/readyz once started: %d", status)
	}
	id := h.running("go")

	stopped := make(chan error, 1)
	go func() { stopped <- h.srv.Stop(context.Background()) }()
	waitFor(t, "/readyz to say 503", func() bool { return h.Call("GET", "/readyz", "", nil) == 503 })
	if status := h.Call("POST", "/v1/jobs", `{"queue": "work", "payload": "other"}`, nil); status != 503 {
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
	if log := h.Log(); !strings.Contains(log, `msg="job settled"`) || !strings.Contains(log, "drained: every running job finished and settled") ||
		!strings.Contains(log, "wasmjobs stopped") {
		t.Fatalf("the job did not settle in the drain:\n%s", log)
	}
	if status := h.Call("GET", "/readyz", "", nil); status != 0 {
		t.Errorf("the listener still answers after Stop: %d", status)
	}
}

// TestStopAtTheDrainDeadline: a job still running at the drain deadline is left
// unacknowledged, and Stop returns within the deadline plus server.CloseGrace.
func TestStopAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	const drain = 300 * time.Millisecond
	h := newTestHost(t, nil, server.Config{DrainTimeout: drain})
	h.Start()
	h.running("never")
	start := time.Now()
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop at the drain deadline: %v, want nil", err)
	}
	if took := time.Since(start); took > drain+server.CloseGrace {
		t.Errorf("Stop took %v, past the drain timeout %v plus server.CloseGrace", took, drain)
	}
	log := h.Log()
	if !strings.Contains(log, "drain timeout: unfinished jobs left unacknowledged") || strings.Contains(log, `msg="job settled"`) {
		t.Fatalf("want the job left unacknowledged, not settled:\n%s", log)
	}
}

// TestACancelledStopEndsWithinCloseGrace: a Stop whose context is cancelled (a second
// signal) ends the drain at once, and the parts then stop within CloseGrace of it,
// not of the drain timeout: a client that holds a connection half-sent does not keep
// the API's shutdown going.
func TestACancelledStopEndsWithinCloseGrace(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, server.Config{DrainTimeout: time.Hour})
	h.Start()
	h.running("never")
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n")); err != nil { // no end of headers
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	h.srv.Stop(ctx)
	if took := time.Since(start); took > 100*time.Millisecond+server.CloseGrace+time.Second {
		t.Errorf("Stop took %v after its context was cancelled at 100ms, want CloseGrace (%v) at most", took, server.CloseGrace)
	}
}

// closeFails is a backend whose Close closes it and then fails with errCloseFailed.
type closeFails struct{ backend.Backend }

var errCloseFailed = errors.New("the store could not be flushed")

func (b closeFails) Close(ctx context.Context) error {
	return errors.Join(b.Backend.Close(ctx), errCloseFailed)
}

// TestStopReturnsTheBackendsCloseError: a backend that fails to close (its data
// directory may still be locked) makes Stop fail with its error, after a drain as
// after no start at all.
func TestStopReturnsTheBackendsCloseError(t *testing.T) {
	t.Parallel()
	for _, started := range []bool{true, false} {
		h := newTestHost(t, closeFails{memory.New(memory.Config{})}, server.Config{})
		if started {
			h.Start()
		}
		if err := h.srv.Stop(context.Background()); !errors.Is(err, errCloseFailed) || !strings.Contains(err.Error(), "stopping the backend") {
			t.Errorf("Stop (started %v) of a backend whose close fails: %v, want its error", started, err)
		}
	}
}

// TestStartThenStop: a host with nothing running stops at once; the lifecycle's
// misuses answer with its sentinel errors.
func TestStartThenStop(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, server.Config{})
	h.Start()
	if err := h.srv.Start(context.Background()); !errors.Is(err, server.ErrStarted) {
		t.Errorf("a second Start: %v, want server.ErrStarted", err)
	}
	start := time.Now()
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > server.CloseGrace {
		t.Errorf("Stop with nothing running took %v", took)
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, server.ErrStopped) {
		t.Errorf("a second Stop: %v, want server.ErrStopped", err)
	}
	if err := h.srv.Start(context.Background()); !errors.Is(err, server.ErrStopped) {
		t.Errorf("Start after Stop: %v, want server.ErrStopped", err)
	}
}

// TestStopBeforeStart: a host never started is not ready, and Stop releases what New
// built, the backend and the listener included.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	h := newTestHost(t, b, server.Config{})
	if rec := serveRecorded(h.srv, "GET", "/readyz"); rec != 503 {
		t.Errorf("/readyz before Start: %d, want 503", rec)
	}
	if _, err := h.srv.Enqueue(context.Background(), server.Job{Queue: "work"}); !errors.Is(err, server.ErrDraining) || !strings.Contains(err.Error(), "not started") {
		t.Errorf("Enqueue before Start: %v, want the host's refusal saying it is not started", err)
	}
	if code, body := postJob(h.srv); code != 503 || !strings.Contains(body, "not started") || strings.Contains(body, "draining") {
		t.Errorf("POST /v1/jobs before Start: %d %s, want 503 saying the host is not started (not that it drains)", code, body)
	}
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := b.Publish(context.Background(), backend.NewEnvelope("work", nil), 0); !errors.Is(err, backend.ErrShutDown) {
		t.Errorf("Publish after Stop: %v, want the backend closed (ErrShutDown)", err)
	}
	if status := h.Call("GET", "/readyz", "", nil); status != 0 {
		t.Errorf("the listener answers after Stop: %d", status)
	}
	if err := h.srv.Start(context.Background()); !errors.Is(err, server.ErrStopped) {
		t.Errorf("Start after Stop: %v, want server.ErrStopped", err)
	}
}

// TestStartGivesUpWithItsContext: a Start whose context ended fails with its error
// (what `run` takes for a signal during the start) and starts no part: the registry
// reads no module and no queue is consumed; Stop still answers after it.
func TestStartGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	b := &slowConsume{Backend: memory.New(memory.Config{})}
	h := newTestHost(t, b, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.srv.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start on an ended context: %v, want context.Canceled", err)
	}
	if n, mods := b.consumed.Load(), h.srv.Inspector().Modules(); n != 0 || len(mods) != 0 {
		t.Errorf("a Start on an ended context consumed %d queues and read %d modules, want none", n, len(mods))
	}
	if status := serveRecorded(h.srv, "GET", "/readyz"); status != 503 {
		t.Errorf("/readyz after a Start that gave up: %d, want 503", status)
	}
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a Start that gave up: %v", err)
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, server.ErrStopped) {
		t.Errorf("a second Stop after a Start that gave up: %v, want server.ErrStopped", err)
	}
}

// TestFailedStartReleasesTheHost: a failed Start with no Stop after it (the documented
// pattern returns Start's error) leaves nothing running: the pebble backend is closed,
// so its data directory opens again.
func TestFailedStartReleasesTheHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := pebble.Open(context.Background(), pebble.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHost(t, b, server.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.srv.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start on an ended context: %v, want context.Canceled", err)
	}
	again, err := pebble.Open(context.Background(), pebble.Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopening the data directory after a failed Start, without Stop: %v", err)
	}
	again.Close(context.Background())
}

// TestStopDuringStart: a Stop while a part is starting (here the worker's Consume,
// which returns late after its context ended) makes Start return ErrStopped, not the
// part's error, and returns only once Start has returned, even when Stop's own context
// has ended: no part starts after its stop ran.
func TestStopDuringStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ended bool // Stop's context
	}{{"Stop with time", false}, {"Stop with an ended context", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &slowConsume{Backend: memory.New(memory.Config{}), entered: make(chan struct{}), linger: 200 * time.Millisecond}
			h := newTestHost(t, b, server.Config{})
			started := make(chan error, 1)
			go func() { started <- h.srv.Start(context.Background()) }()
			<-b.entered
			ctx, cancel := context.WithCancel(context.Background())
			if tc.ended {
				cancel()
			}
			defer cancel()
			if err := h.srv.Stop(ctx); err != nil {
				t.Errorf("Stop during Start: %v", err)
			}
			select {
			case err := <-started:
				if !errors.Is(err, server.ErrStopped) {
					t.Errorf("Start ended by Stop: %v, want server.ErrStopped", err)
				}
			default:
				t.Error("Stop returned while Start was still starting parts")
				<-started
			}
		})
	}
}

// TestSecondStopWaitsForTheDrain: a Stop while another drains (a deferred Stop beside
// a signal's) returns ErrStopped only once that drain ended, or when its own context
// ends first.
func TestSecondStopWaitsForTheDrain(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, nil, server.Config{DrainTimeout: time.Hour})
	h.Start()
	h.running("go")
	first := make(chan error, 1)
	go func() { first <- h.srv.Stop(context.Background()) }()
	waitFor(t, "/readyz to say 503", func() bool { return h.Call("GET", "/readyz", "", nil) == 503 })

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.srv.Stop(short); !errors.Is(err, server.ErrStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second Stop whose context ends mid-drain: %v, want server.ErrStopped and its context's error", err)
	}
	second := make(chan error, 1)
	go func() { second <- h.srv.Stop(context.Background()) }()
	select {
	case err := <-second:
		t.Fatalf("a second Stop returned mid-drain: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	h.release("go")
	if err := <-first; err != nil {
		t.Fatalf("the first Stop: %v", err)
	}
	select {
	case err := <-second:
		if !errors.Is(err, server.ErrStopped) {
			t.Errorf("the second Stop: %v, want server.ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Stop did not return after the first")
	}
}

// slowConsume is a memory backend that counts its Consume calls and, with entered
// set, holds the first one until its context ends, then linger more (a slow part's
// start), failing it as the worker would.
type slowConsume struct {
	*memory.Backend
	consumed atomic.Int32
	entered  chan struct{}
	linger   time.Duration
	once     sync.Once
}

func (b *slowConsume) Consume(ctx context.Context, q backend.QueueConfig) (backend.Stream, error) {
	b.consumed.Add(1)
	if b.entered == nil {
		return b.Backend.Consume(ctx, q)
	}
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	time.Sleep(b.linger)
	return nil, ctx.Err()
}

// TestNoEnqueueAfterStop: once Stop has closed a backend that keeps jobs (pebble, which
// takes them through the drain), Enqueue and POST /v1/jobs refuse new jobs as a
// draining host does, rather than reach the closed backend.
func TestNoEnqueueAfterStop(t *testing.T) {
	t.Parallel()
	b, err := pebble.Open(context.Background(), pebble.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHost(t, b, server.Config{})
	h.Start()
	if err := h.srv.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := h.srv.Enqueue(context.Background(), server.Job{Queue: "work"}); !errors.Is(err, server.ErrDraining) {
		t.Errorf("Enqueue after Stop: %v, want the host's refusal (server.ErrDraining)", err)
	}
	if code, body := postJob(h.srv); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("POST /v1/jobs after Stop: %d %s, want 503 and the host's refusal (draining)", code, body)
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
	h := newTestHost(t, b, server.Config{})
	h.Start()
	if status := h.Call("GET", "/healthz", "", nil); status != 200 {
		t.Fatalf("/healthz before the failure: %d", status)
	}
	b.broken.Store(true)
	select {
	case <-h.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the store failed")
	}
	if hz, rz := h.Call("GET", "/healthz", "", nil), h.Call("GET", "/readyz", "", nil); hz != 503 || rz != 503 {
		t.Errorf("/healthz %d, /readyz %d after the store failed, want 503", hz, rz)
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, errBroken) {
		t.Fatalf("Stop: %v, want the store's failure", err)
	}
	if !strings.Contains(h.Log(), `level=ERROR msg="the backend's store failed`) {
		t.Errorf("no error logged for the failed store:\n%s", h.Log())
	}
}

// testHost is a host of the rig (wasmjobstest.Host) serving the module "work", the
// testdata module wait_file: a job runs until the test creates the file its payload
// names in gate (release), or until the drain deadline ends it.
type testHost struct {
	*wasmjobstest.Host
	t    *testing.T
	srv  *server.Server
	gate string
}

// newTestHost builds a host, not started, on b (nil means a memory backend) with cfg;
// the rig sets cfg's Modules, Logger and Listener (a loopback one, which the server
// serves from Start on).
func newTestHost(t *testing.T, b backend.Backend, cfg server.Config) *testHost {
	t.Helper()
	h := &testHost{Host: wasmjobstest.NewHost(t, wasmjobstest.HostConfig{Backend: b, Server: cfg, NoStart: true}), t: t, gate: t.TempDir()}
	h.srv = h.Server()
	wasm, err := os.ReadFile("../testdata/abi/wait_file.wasm")
	if err != nil {
		t.Fatal(err)
	}
	h.AddModule("work", wasm, fmt.Sprintf("max_attempts = 1\ntimeout = \"1h\"\ndirs = [%q]\n", h.gate+":/gate"))
	return h
}

// enqueue enqueues a job of "work" that waits for the file name, and returns its id.
func (h *testHost) enqueue(name string) string { return h.Enqueue("work", []byte(name)) }

// running enqueues a job of "work" that waits for the file name, waits until it runs,
// and returns its id.
func (h *testHost) running(name string) string {
	h.t.Helper()
	id := h.enqueue(name)
	h.WaitState(id, "running")
	return id
}

// state is the job's state as the API reports it.
func (h *testHost) state(id string) string { return h.Job(id).State }

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

// postJob posts a job of "work" straight to s's Handler and returns the status and
// the body of the answer.
func postJob(s *server.Server) (int, string) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(`{"queue": "work", "payload": "x"}`))
	req.Host, req.Header["Content-Type"] = "127.0.0.1", []string{"application/json"}
	s.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// serveRecorded sends a request straight to s's Handler and returns the status.
func serveRecorded(s *server.Server, method, path string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, nil)
	req.Host = "127.0.0.1" // the listener is on loopback: the API checks the Host
	s.Handler().ServeHTTP(rec, req)
	return rec.Code
}

// TestNewLoadsTheKeyPair: a missing or bad TLS file fails New, naming the file, rather
// than a listener that fails after a Start that succeeded.
func TestNewLoadsTheKeyPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing, noPEM := filepath.Join(dir, "missing.pem"), filepath.Join(dir, "nopem.pem")
	if err := os.WriteFile(noPEM, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{missing, noPEM} {
		b := memory.New(memory.Config{})
		srv, err := server.New(b, server.Config{Modules: dir, TLSCertFile: file, TLSKeyFile: file})
		if err == nil {
			srv.Stop(context.Background())
			t.Errorf("New with the key pair %s: no error", file)
			continue
		}
		b.Close(context.Background())
		if !strings.Contains(err.Error(), file) {
			t.Errorf("New with the key pair %s: %v, want the file named", file, err)
		}
	}
}

// TestListenerFailureStops: a listener that fails while the host serves closes Done,
// and Stop returns its failure instead of nil.
func TestListenerFailureStops(t *testing.T) {
	t.Parallel()
	broken := &brokenListener{Listener: listen(t, "tcp", "127.0.0.1:0"), broken: make(chan struct{})}
	h := newTestHost(t, nil, server.Config{Listener: broken})
	if err := h.srv.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	close(broken.broken)
	select {
	case <-h.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the listener failed")
	}
	if err := h.srv.Stop(context.Background()); !errors.Is(err, errAccept) {
		t.Fatalf("Stop after the listener failed: %v, want its failure", err)
	}
}

var errAccept = errors.New("accept: the socket broke")

// listen listens on addr of network until the test ends: the socket that the
// listeners of these tests are, or wrap.
func listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// brokenListener is a listener whose Accept fails for good once broken is closed.
type brokenListener struct {
	net.Listener
	broken chan struct{}
}

func (l *brokenListener) Accept() (net.Conn, error) {
	<-l.broken
	return nil, errAccept
}

// TestNewGuardsAListenerBeyondLoopback: New applies run's checks to a Listener beyond
// loopback: a token is required, and TLS unless Config.InsecureHTTP says otherwise. A
// Unix socket stays on this machine, as loopback does: it needs neither.
func TestNewGuardsAListenerBeyondLoopback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  server.Config
		want string // in New's error; empty: New succeeds
		unix bool   // a Unix socket, not a listener beyond loopback
	}{
		{"no token", server.Config{InsecureHTTP: true}, "set Config.Token", false},
		{"plain HTTP", server.Config{Token: "t"}, "or Config.InsecureHTTP", false},
		{"plain HTTP asked for", server.Config{Token: "t", InsecureHTTP: true}, "", false},
		{"unix socket", server.Config{}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := memory.New(memory.Config{})
			cfg := tc.cfg
			cfg.Modules, cfg.CacheDir = dir, t.TempDir()
			if tc.unix {
				cfg.Listener = listen(t, "unix", filepath.Join(t.TempDir(), "api.sock"))
			} else {
				cfg.Listener = remoteListener{listen(t, "tcp", "127.0.0.1:0")}
			}
			srv, err := server.New(b, cfg)
			if err == nil {
				srv.Stop(context.Background())
			} else {
				b.Close(context.Background())
			}
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("New: %v, want %q", err, cmp.Or(tc.want, "no error"))
			}
		})
	}
}

// remoteListener is a listener that says it listens beyond loopback.
type remoteListener struct{ net.Listener }

func (remoteListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080} }

// TestAUnixSocketListenerServes: the API on a Unix socket needs no token and answers
// a client whatever name its URL gives the host (no web page can reach a socket, so
// the loopback Host check does not apply).
func TestAUnixSocketListenerServes(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "api.sock")
	wasmjobstest.NewHost(t, wasmjobstest.HostConfig{Server: server.Config{Listener: listen(t, "unix", sock)}})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer client.CloseIdleConnections()
	for _, host := range []string{"unix", "localhost", "wasmjobs.internal"} {
		resp, err := client.Get("http://" + host + "/v1/queues")
		if err != nil {
			t.Fatalf("GET over the socket as %s: %v", host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/queues over the socket, Host %s: %d, want 200", host, resp.StatusCode)
		}
	}
}
