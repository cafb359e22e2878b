package server_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/server"
)

// TestEnqueueErrorKinds: Enqueue's errors are of the kinds its doc promises, exported
// by server for errors.Is and errors.As: a host not started yet (ErrDraining, in its
// own words), a job's checks (ErrInvalid, ErrTooLarge), a
// batch past MaxBatch, a queue no module serves, and a batch published part way (a
// *server.PartialError with the ids accepted before the failure).
func TestEnqueueErrorKinds(t *testing.T) {
	t.Parallel()
	b := &failingPublish{Backend: memory.New(memory.Config{}), okPublishes: 1}
	h := newTestHost(t, b, server.Config{})
	ctx := context.Background()
	if _, err := h.srv.Enqueue(ctx, server.Job{Queue: "work"}); !errors.Is(err, server.ErrDraining) ||
		!strings.Contains(err.Error(), "not started") || strings.Contains(err.Error(), "draining") {
		t.Errorf("Enqueue before Start: %v, want server.ErrDraining saying the host is not started", err)
	}
	h.Start()
	later := func(payload []byte) server.Job { return server.Job{Queue: "work", Payload: payload, Delay: time.Hour} }
	for _, tc := range []struct {
		name string
		jobs []server.Job
		kind error
		want string
	}{
		{"a priority past MaxPriority", []server.Job{{Queue: "work", Priority: server.MaxPriority + 1}}, server.ErrInvalid, "priority 2: want 0 to 1"},
		{"a payload past the limit", []server.Job{later(make([]byte, 1<<20+1))}, server.ErrTooLarge, "passes queue work's limit"},
		{"a bad job in a batch", []server.Job{later(nil), {Queue: "work", Delay: -time.Second}}, server.ErrInvalid, "jobs[1]: delay -1s is negative"},
		{"a batch past MaxBatch", make([]server.Job, server.MaxBatch+1), server.ErrInvalid, "want 1 to 1000 jobs"},
		{"a queue no module serves", []server.Job{{Queue: "other"}}, backend.ErrUnknownQueue, "other"},
	} {
		if _, err := h.srv.Enqueue(ctx, tc.jobs...); !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q of the kind %v", tc.name, err, tc.want, tc.kind)
		}
	}
	_, err := h.srv.Enqueue(ctx, later([]byte("a")), later([]byte("b")))
	var pe *server.PartialError
	if !errors.As(err, &pe) || len(pe.IDs) != 1 || !errors.Is(err, errPublish) {
		t.Fatalf("a batch whose second publish failed: %v, want a *server.PartialError with the first job's id", err)
	}
	if job := h.Job(pe.IDs[0]); job.State != "deferred" { // its delay: an hour
		t.Errorf("the job accepted before the failure: %q, want it deferred", job.State)
	}
	res, err := h.srv.Enqueue(ctx, later([]byte("c")))
	if !errors.Is(err, errPublish) || res.IDs != nil {
		t.Errorf("a job whose publish failed: %v, %v; want the publish's error and no id", res, err)
	}
}

var errPublish = errors.New("the disk is full")

// failingPublish is a memory backend whose publishes fail after okPublishes of them.
type failingPublish struct {
	*memory.Backend
	okPublishes int32
	n           atomic.Int32
}

func (b *failingPublish) Publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	if b.n.Add(1) > b.okPublishes {
		return errPublish
	}
	return b.Backend.Publish(ctx, env, delay)
}
