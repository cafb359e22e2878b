package inspect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// TestEnqueueBeforeTheHostStarted: before the host has started, Enqueue refuses a job
// with ErrDraining while Refusal has an error, and with backend.ErrUnknownQueue while no
// module serves its queue; neither publishes anything. Once both hold, it is queued.
func TestEnqueueBeforeTheHostStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started := false
	rig := inspecttest.New(t, inspecttest.Options{Inspect: func(c *inspect.Config) { c.Refusal = inspecttest.Refusal(func() bool { return started }) }})
	job := jobspec.Spec{Queue: "echo", Payload: []byte("x")}
	if _, err := rig.Inspector.Enqueue(ctx, job); !errors.Is(err, inspect.ErrDraining) {
		t.Errorf("Enqueue before the start: %v, want ErrDraining", err)
	}
	unserved := inspect.New(inspect.Config{Backend: rig.Backend, Records: rig.Records})
	if _, err := unserved.Enqueue(ctx, job); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Errorf("Enqueue with no module served yet: %v, want ErrUnknownQueue", err)
	}
	if st, err := rig.Inspector.Stats(ctx, "echo"); err != nil || st.Pending != 0 || rig.Records.Len() != 0 {
		t.Fatalf("after the refusals: %+v %v, %d jobs known; want nothing", st, err, rig.Records.Len())
	}
	started = true
	res, err := rig.Inspector.Enqueue(ctx, job)
	if err != nil || len(res.IDs) != 1 {
		t.Fatalf("Enqueue once started: %+v %v", res, err)
	}
	if st, _ := rig.Inspector.Stats(ctx, "echo"); st.Pending != 1 {
		t.Errorf("after the enqueue: %+v, want the job pending", st)
	}
}
