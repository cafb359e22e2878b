package main

import (
	"context"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/inspect"
)

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
