package host_test

import (
	"context"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// backendWithQueues returns a memory backend with the queues declared, closed with the
// test.
func backendWithQueues(t testing.TB, queues ...string) *memory.Backend {
	t.Helper()
	b := memory.New(memory.Config{})
	t.Cleanup(func() { b.Close(context.Background()) })
	for _, q := range queues {
		if err := b.Declare(context.Background(), backend.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}
