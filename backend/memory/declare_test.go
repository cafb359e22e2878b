package memory_test

import (
	"context"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// TestConflictingDeclarationFailsLikeABroker: a queue declared again with other
// priority levels is refused with an error naming both, and keeps its first
// declaration and its messages, as RabbitMQ does; the same declaration, or one that
// differs only in prefetch, is accepted.
func TestConflictingDeclarationFailsLikeABroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)
	q := backend.QueueConfig{Name: "jobs", Prefetch: 2, PriorityLevels: 2}
	if err := b.Declare(ctx, q); err != nil {
		t.Fatal(err)
	}
	env := backend.NewEnvelope("jobs", []byte("kept"))
	env.Priority = 2
	if err := b.Publish(ctx, env, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		levels, prefetch int
		want             string
	}{
		{2, 2, ""},
		{2, 7, ""},
		{5, 2, `queue "jobs" exists with 2 priority levels, not the 5 wanted: it keeps its first declaration`},
		{0, 2, `queue "jobs" exists with 2 priority levels, not the 0 wanted: it keeps its first declaration`},
	} {
		err := b.Declare(ctx, backend.QueueConfig{Name: "jobs", Prefetch: tc.prefetch, PriorityLevels: tc.levels})
		if got := errString(err); got != tc.want {
			t.Errorf("Declare(levels %d, prefetch %d) = %q, want %q", tc.levels, tc.prefetch, got, tc.want)
		}
	}
	if p, err := b.Pending("jobs"); err != nil || len(p) != 1 || string(p[0].Payload) != "kept" || p[0].Priority != 2 {
		t.Fatalf("after the conflicts the queue holds %+v, %v: want the one job it had", p, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
