package backendtest

import (
	"errors"
	"maps"
	"strconv"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

func testDeadLetters(t *testing.T, h *harness) {
	q := h.declare(t, 8, 0)
	store, ok := h.b.(backend.DeadLetterStore)
	if !ok {
		t.Fatalf("%T does not implement backend.DeadLetterStore", h.b)
	}
	var jobs []backend.Envelope
	for _, p := range []string{"one", "two", "three"} {
		env := job(q, p)
		env.Attempt = 4
		// A job's own headers survive a replay; the outage it waited out does not.
		env.Headers = map[string]string{"x-tenant": p, backend.OutageHeader: "1700000000000"}
		jobs = append(jobs, env)
		h.publish(t, env, 0)
	}
	s := h.consume(t, q)
	for range jobs {
		d, env := h.receive(t, s)
		mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "reason "+string(env.Payload)))
	}
	dead := h.deadLetters(t, q)
	if len(dead) != 3 {
		t.Fatalf("%d dead letters, want 3", len(dead))
	}
	for i, dl := range dead {
		if dl.Envelope.ID != jobs[i].ID || dl.Reason != "reason "+string(jobs[i].Payload) {
			t.Errorf("dead letter %d = %s %q, want %s %q", i, dl.Envelope.ID, dl.Reason, jobs[i].ID, "reason "+string(jobs[i].Payload))
		}
	}
	if two, err := store.DeadLetters(h.ctx(), q.Name, 2); err != nil || len(two) != 2 {
		t.Fatalf("DeadLetters with limit 2: %d, %v", len(two), err)
	}
	if err := store.ReplayDeadLetter(h.ctx(), q.Name, jobs[1].ID); err != nil {
		t.Fatalf("ReplayDeadLetter: %v", err)
	}
	// Each replay is one generation more (backend.Replayed): the second replay of the
	// job, dead-lettered again, is generation 2.
	for gen := 1; gen <= 2; gen++ {
		d, env := h.receive(t, s)
		if env.ID != jobs[1].ID || env.Attempt != 1 || env.Reason != "" {
			t.Fatalf("replayed job = %+v, want %s at attempt 1 without a reason", env, jobs[1].ID)
		}
		want := map[string]string{"x-tenant": "two", backend.ReplayHeader: strconv.Itoa(gen)}
		if !maps.Equal(env.Headers, want) {
			t.Fatalf("replay %d: headers %v, want %v", gen, env.Headers, want)
		}
		if gen == 2 {
			mustSettle(t, "Ack", d.Ack(h.ctx()))
			break
		}
		mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "again"))
		if err := store.ReplayDeadLetter(h.ctx(), q.Name, jobs[1].ID); err != nil {
			t.Fatalf("ReplayDeadLetter, generation 2: %v", err)
		}
	}
	if err := store.ReplayDeadLetter(h.ctx(), q.Name, jobs[1].ID); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("replaying it again: %v, want ErrNotFound", err)
	}
	n, err := store.PurgeDeadLetters(h.ctx(), q.Name)
	if err != nil || n != 2 {
		t.Fatalf("PurgeDeadLetters = %d, %v; want 2", n, err)
	}
	if dead := h.deadLetters(t, q); len(dead) != 0 {
		t.Fatalf("%d dead letters after purge", len(dead))
	}
	h.expectNothing(t, q, s)
}
