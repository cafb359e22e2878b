package memory

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// heldIDs counts the ids the queue keeps for dropping repeats.
func heldIDs(t *testing.T, b *Backend, queue string) int {
	t.Helper()
	q, err := b.queues.Lookup(queue)
	if err != nil {
		t.Fatal(err)
	}
	q.Lock()
	defer q.Unlock()
	return len(q.ids)
}

// TestRepeatBookkeepingDoesNotLeak: the per-id counts the memory backend keeps to drop
// repeats hold an id while the queue holds its job, and no longer: after an ack, a
// retry, a defer, a dead-letter, a replay, a purge and a dropped stream, every entry is
// gone.
func TestRepeatBookkeepingDoesNotLeak(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := New(Config{})
		defer b.Close(ctx)
		if err := b.Declare(ctx, backend.QueueConfig{Name: "q", Prefetch: 10}); err != nil {
			t.Fatal(err)
		}
		want := func(step string, n int) {
			t.Helper()
			synctest.Wait()
			if got := heldIDs(t, b, "q"); got != n {
				t.Fatalf("%s: %d ids held, want %d", step, got, n)
			}
		}
		publish := func(id string) backend.Envelope {
			t.Helper()
			env := backend.NewEnvelope("q", []byte(id))
			env.ID = id
			if err := b.Publish(ctx, env, 0); err != nil {
				t.Fatal(err)
			}
			return env
		}
		s, err := b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 10})
		if err != nil {
			t.Fatal(err)
		}
		next := func() backend.Delivery {
			t.Helper()
			d, ok := <-s.Deliveries()
			if !ok {
				t.Fatal("stream ended")
			}
			return d
		}
		settle := func(step string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}

		publish("ack")
		publish("ack") // a repeat: dropped, not counted twice
		want("published", 1)
		settle("ack", next().Ack(ctx))
		want("acked", 0)

		env := publish("retry")
		settle("retry", next().Retry(ctx, env, time.Second))
		want("retried, delayed", 1)
		time.Sleep(time.Second)
		settle("ack after retry", next().Ack(ctx))
		want("acked after the retry", 0)

		env = publish("defer")
		settle("defer", next().Defer(ctx, env, time.Second))
		want("deferred", 1)
		time.Sleep(time.Second)
		settle("dead-letter", next().DeadLetter(ctx, "no"))
		want("dead-lettered", 0)
		settle("replay", b.ReplayDeadLetter(ctx, "q", "defer"))
		want("replayed", 1)
		settle("ack after replay", next().Ack(ctx))
		want("acked after the replay", 0)

		publish("purge")
		settle("dead-letter", next().DeadLetter(ctx, "no"))
		if n, err := b.PurgeDeadLetters(ctx, "q"); err != nil || n != 1 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		want("purged", 0)

		if err := b.InjectMalformed(ctx, "q", []byte("{"), "not JSON"); err != nil {
			t.Fatal(err)
		}
		settle("dead-letter a malformed one", next().DeadLetter(ctx, "malformed"))
		want("malformed dead-lettered", 0)

		publish("drop")
		next() // taken and never settled
		s.Drop()
		want("dropped: the job is back in the queue", 1)
		s, err = b.Consume(ctx, backend.QueueConfig{Name: "q", Prefetch: 10})
		if err != nil {
			t.Fatal(err)
		}
		settle("ack after drop", next().Ack(ctx))
		want("acked after the drop", 0)
		s.Drop()
	})
}
