package server

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
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
