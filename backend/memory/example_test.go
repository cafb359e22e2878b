package memory_test

import (
	"context"
	"fmt"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

// A job's trip: declare a queue, publish, consume, settle, and inspect the queue.
func Example() {
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)

	q := backend.QueueConfig{Name: "emails", Prefetch: 8}
	if err := b.Declare(ctx, q); err != nil {
		panic(err)
	}
	_ = b.Publish(ctx, backend.NewEnvelope("emails", []byte(`{"to":"ada@example.com"}`)), 0)
	_ = b.Publish(ctx, backend.NewEnvelope("emails", []byte(`not json`)), 0)

	s, _ := b.Consume(ctx, q)
	defer s.Drop()
	for range 2 {
		d := <-s.Deliveries()
		env, _ := d.Envelope()
		if env.Payload[0] != '{' {
			_ = d.DeadLetter(ctx, "payload is not a JSON object")
			continue
		}
		fmt.Printf("sending %s\n", env.Payload)
		_ = d.Ack(ctx)
	}
	st, _ := b.Stats("emails")
	fmt.Printf("acked %d, dead %d\n", st.Acked, st.Dead)
	dead, _ := b.DeadLetters(ctx, "emails", 0)
	fmt.Println(dead[0].Reason)
	// Output:
	// sending {"to":"ada@example.com"}
	// acked 1, dead 1
	// payload is not a JSON object
}
