package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
)

// TestDrainDuringBrokerOutage: with the broker unreachable and a job running, SIGTERM
// to `run --drain-timeout 5s` exits within 10 s. The outage is a proxy of this test's
// own that it cuts, so the shared broker is left alone.
func TestDrainDuringBrokerOutage(t *testing.T) {
	t.Parallel()
	drainDuringOutage(t, func(t *testing.T, h *hostProc, px *testbroker.Proxy) {
		px.Cut()
		waitFor(t, "the host to see the outage", func() bool { return strings.Contains(h.log(), "RabbitMQ connection lost") })
	})
}

// TestDrainWhileBrokerHangs: the same with a broker that hangs instead (connections stay
// open, nothing is answered), which no error reveals: SIGTERM still exits within 10 s.
func TestDrainWhileBrokerHangs(t *testing.T) {
	t.Parallel()
	drainDuringOutage(t, func(t *testing.T, h *hostProc, px *testbroker.Proxy) { px.Freeze() })
}

// drainDuringOutage starts a host through a proxy, runs a job that spins, makes the
// outage, sends SIGTERM and checks that run exits cleanly within the drain timeout
// plus a margin.
func drainDuringOutage(t *testing.T, outage func(t *testing.T, h *hostProc, px *testbroker.Proxy)) {
	url := brokerURL(t)
	px := testbroker.NewProxy(t, url)
	dir := t.TempDir()
	name := "outage-" + strings.ToLower(t.Name()[len(t.Name())-6:]) + "-" + time.Now().Format("150405.000000")
	name = strings.ReplaceAll(name, ".", "")
	installModule(t, dir, "hostile/loop", name, "1")
	writeManifest(t, dir, name, "timeout = \"60s\"\nmax_attempts = 1\n")
	h := startHost(t, dir, "--backend", px.URL(url), "--drain-timeout", "5s")
	r := wasmjobs(t, "", "enqueue", name, "spin", "--server", h.url)
	if r.code != 0 {
		t.Fatalf("enqueue: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var st jobState
	waitFor(t, "the job to run", func() bool { h.get("/v1/jobs/"+id, &st); return st.State == "running" })

	outage(t, h, px)
	start := time.Now()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.done:
		took := time.Since(start)
		t.Logf("exited %v after SIGTERM (drain timeout 5s)", took)
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
		if took > 10*time.Second {
			t.Fatalf("exited %v after SIGTERM: past the 5s drain timeout and a margin", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM with a 5s drain timeout")
	}
	if !strings.Contains(h.log(), "drain timeout: unfinished jobs left unacknowledged") {
		t.Fatalf("no drain timeout logged:\n%s", h.log())
	}
}

// notifyWriter is a log sink that reports when a line containing want is written.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// inProcess is `run` served in the test's own process (runFlags.serve), for the tests
// that give it signals, a backend or a hard exit of theirs.
type inProcess struct {
	logs *notifyWriter // reports the host serving
	errc chan error
}

// serveInProcess runs f.serve in a goroutine, its compilation cache in cacheDir, on
// sigs, with exit as its hard exit.
func serveInProcess(f *runFlags, cacheDir string, sigs <-chan os.Signal, exit func()) *inProcess {
	p := &inProcess{logs: &notifyWriter{want: "wasmjobs serving", seen: make(chan struct{})}, errc: make(chan error, 1)}
	go func() { p.errc <- f.serve(context.Background(), &globals{cacheDir: cacheDir}, p.logs, sigs, exit) }()
	return p
}

// waitServing waits for the host to serve; the test fails if run returns first or
// does not serve within 30 s.
func (p *inProcess) waitServing(t *testing.T) {
	t.Helper()
	select {
	case <-p.logs.seen:
	case err := <-p.errc:
		t.Fatalf("run returned before serving: %v\n%s", err, p.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not serve:\n%s", p.logs)
	}
}

// result waits up to within for run to return and returns its error; the test fails
// if it has not returned by then.
func (p *inProcess) result(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-p.errc:
		return err
	case <-time.After(within):
		t.Fatalf("run did not return within %v:\n%s", within, p.logs)
		return nil
	}
}

// TestRunLeavesNothingBehind runs `run` in this process and checks that it leaves no
// goroutine behind, on an early error (after the backend is open) and after a signal.
// Not parallel: goleak must see this test's goroutines only.
func TestRunLeavesNothingBehind(t *testing.T) {
	for _, c := range []struct {
		name    string
		backend func(t *testing.T) string
		cache   func(t *testing.T) string
		signal  bool
		wantErr string
	}{
		{"early error with the backend open", func(t *testing.T) string { return brokerURL(t) }, func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			os.WriteFile(f, nil, 0o644)
			return f // a file where the cache directory should be: the engine fails
		}, false, "compilation cache"},
		{"signal", func(*testing.T) string { return "memory" }, func(t *testing.T) string { return t.TempDir() }, true, ""},
		{"signal on pebble", func(*testing.T) string { return "pebble" }, func(t *testing.T) string { return t.TempDir() }, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			dir := t.TempDir()
			installModule(t, dir, "abi/echo", "echo", "1")
			f := &runFlags{modules: dir, backend: c.backend(t), dataDir: t.TempDir(), concurrency: 2, listen: "127.0.0.1:0",
				drainTimeout: 5 * time.Second, logFormat: "text", logLevel: "info", history: 10}
			sigs := make(chan os.Signal, 2)
			exited := make(chan struct{}, 1)
			p := serveInProcess(f, c.cache(t), sigs, func() { exited <- struct{}{} })
			logs := p.logs
			if c.signal {
				p.waitServing(t)
				sigs <- syscall.SIGTERM
			}
			err := p.result(t, 30*time.Second)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("run: %v, want %q\n%s", err, c.wantErr, logs)
			}
			select {
			case <-exited:
				t.Fatal("one signal made run exit at once")
			default:
			}
			if c.signal && !strings.Contains(logs.String(), "wasmjobs stopped") {
				t.Fatalf("no stop logged:\n%s", logs)
			}
		})
	}
}

// TestSignalDuringBrokerConnect: a signal while `run` connects to a broker that
// accepted the connection and never answers takes the clean "stopped before it served"
// path, as one during the worker's start does: no error, exit 0.
func TestSignalDuringBrokerConnect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	dir := t.TempDir()
	f := &runFlags{modules: dir, backend: "amqp://guest:guest@" + ln.Addr().String() + "/", concurrency: 1,
		listen: "127.0.0.1:0", drainTimeout: 5 * time.Second, logFormat: "text", logLevel: "info", history: 10}
	sigs := make(chan os.Signal, 2)
	p := serveInProcess(f, t.TempDir(), sigs, func() {})
	logs := p.logs
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("run did not connect to the broker")
	}
	sigs <- syscall.SIGTERM
	if err := p.result(t, 10*time.Second); err != nil {
		t.Fatalf("run: %v, want nil: a signal during the connection is a clean stop\n%s", err, logs)
	}
	if !strings.Contains(logs.String(), "wasmjobs stopped before it served") {
		t.Fatalf("no clean stop logged:\n%s", logs)
	}
}

// TestRunRefusesAMissingKeyPair: a --tls-cert that cannot be read stops run at its
// start with an error naming the file, not with a listener that fails unseen and an
// exit status of 0.
func TestRunRefusesAMissingKeyPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	r := wasmjobs(t, "", "run", "--modules", dir, "--backend", "memory", "--listen", "127.0.0.1:0",
		"--tls-cert", missing, "--tls-key", missing)
	if r.code == 0 || !strings.Contains(r.stderr, missing) {
		t.Fatalf("run with a missing key pair: exit %d, stderr %q; want a failure naming %s", r.code, r.stderr, missing)
	}
}

// TestRunTakesANegativeHistory: --history 0 or less means the default, as it did
// before run was built on the server package (which refuses a negative History).
func TestRunTakesANegativeHistory(t *testing.T) {
	t.Parallel()
	f := &runFlags{modules: t.TempDir(), backend: "memory", concurrency: 1, listen: "127.0.0.1:0",
		drainTimeout: 5 * time.Second, logFormat: "text", logLevel: "info", history: -1}
	sigs := make(chan os.Signal, 1)
	p := serveInProcess(f, t.TempDir(), sigs, func() {})
	p.waitServing(t)
	sigs <- syscall.SIGTERM
	if err := p.result(t, 10*time.Second); err != nil {
		t.Fatalf("run --history -1: %v", err)
	}
}

// TestOutOfTime: run exits 0 after a Stop whose only failures are parts that ran out
// of time (the process's exit ends them), and fails on any other.
func TestOutOfTime(t *testing.T) {
	t.Parallel()
	late := fmt.Errorf("server: stopping the backend: %w", context.DeadlineExceeded)
	broken := errors.New("stopped on a failed store: disk full")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{late, true},
		{errors.Join(late, fmt.Errorf("worker: %w", context.DeadlineExceeded)), true},
		{errors.Join(late, broken), false},
		{broken, false},
	} {
		if got := outOfTime(tc.err); got != tc.want {
			t.Errorf("outOfTime(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
