package memory_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// BenchmarkMemoryPublishConsumeAck measures one job's trip through the memory backend:
// publish, delivery to a consumer, ack. The publisher and the consumer run concurrently.
func BenchmarkMemoryPublishConsumeAck(b *testing.B) {
	for _, prefetch := range []int{1, 64} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			ctx := context.Background()
			mb := memory.New(memory.Config{})
			defer mb.Close(ctx)
			s := rig.Consume(b, mb, backend.QueueConfig{Name: "bench", Prefetch: prefetch})
			env := backend.NewEnvelope("bench", []byte(`{"n":1}`))
			ids := make([]string, b.N) // one job each: a repeated id would be dropped
			for i := range ids {
				ids[i] = strconv.Itoa(i)
			}
			done := make(chan struct{})
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				defer close(done)
				for range b.N {
					d := <-s.Deliveries()
					if err := d.Ack(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			for _, id := range ids {
				env.ID = id
				if err := mb.Publish(ctx, env, 0); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}
