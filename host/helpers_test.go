package host_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// TestMain fails the package if a goroutine outlives its tests: the registry's follow
// loop, a worker's, a module's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
