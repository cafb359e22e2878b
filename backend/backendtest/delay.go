package backendtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

func testDelaysNeverFireEarly(t *testing.T, h *harness) {
	q := h.declare(t, 16, 0)
	delays := []time.Duration{0, time.Millisecond, 37 * time.Millisecond, 100*time.Millisecond + 500*time.Microsecond, 333 * time.Millisecond, 1234 * time.Millisecond}
	published := make(map[string]time.Time)
	want := make(map[string]time.Duration)
	for _, delay := range delays {
		env := job(q, delay.String())
		published[env.ID] = time.Now()
		want[env.ID] = delay
		h.publish(t, env, delay)
	}
	s := h.consume(t, q)
	for range delays {
		d, env := h.receive(t, s)
		waited := time.Since(published[env.ID])
		if waited < want[env.ID] {
			t.Errorf("job delayed %v arrived after %v: early", want[env.ID], waited)
		}
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	h.expectNothing(t, q, s)
}

func testShortDelayNotHeldBehindLong(t *testing.T, h *harness) {
	q := h.declare(t, 16, 0)
	long, short := job(q, "long"), job(q, "short")
	start := time.Now()
	h.publish(t, long, 2*time.Second)
	h.publish(t, short, 100*time.Millisecond)
	s := h.consume(t, q)
	d, env := h.receive(t, s)
	if env.ID != short.ID {
		t.Fatalf("first delivery is %q: the short delay was held behind the long one", env.Payload)
	}
	if waited := time.Since(start); waited >= 2*time.Second {
		t.Fatalf("the short delay came out after %v, with the long one: held behind it", waited)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	d, env = h.receive(t, s)
	if env.ID != long.ID {
		t.Fatalf("second delivery is %q, want long", env.Payload)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
}

func testDeferredAheadDelayedBehind(t *testing.T, h *harness) {
	q := h.declare(t, 1, 1)
	delay := 100 * time.Millisecond
	// The backlog first: on a backend whose publishes wait for a disk or a broker,
	// three publishes can take longer than the delay.
	for _, p := range []string{"b1", "b2", "b3"} {
		h.publish(t, job(q, p), 0)
	}
	deferred := job(q, "deferred")
	deferred.Priority = 1
	if err := h.b.Defer(h.ctx(), deferred, delay); err != nil {
		t.Fatalf("Defer: %v", err)
	}
	h.publish(t, job(q, "delayed"), delay)
	// Both are released onto the queue, behind the backlog.
	h.waitStats(t, q, "release of the deferred and the delayed job", func(st backend.QueueStats) bool {
		return st.Pending == 5 && st.Delayed <= 0 && st.Deferred <= 0
	})
	got := strings.Join(h.drainInOrder(t, q, 5), " ")
	if want := "deferred b1 b2 b3 delayed"; got != want {
		t.Fatalf("delivery order %q, want %q", got, want)
	}
}

func testUnknownQueue(t *testing.T, h *harness) {
	name := h.prefix + "-nowhere"
	for _, delay := range []time.Duration{0, 250 * time.Millisecond} {
		env := backend.NewEnvelope(name, []byte("x"))
		err := h.b.Publish(h.ctx(), env, delay)
		if !errors.Is(err, backend.ErrUnknownQueue) || !strings.Contains(err.Error(), name) {
			t.Errorf("Publish with delay %v to %s: %v, want ErrUnknownQueue naming the queue", delay, name, err)
		}
	}
	err := h.b.Defer(h.ctx(), backend.NewEnvelope(name, nil), time.Second)
	if !errors.Is(err, backend.ErrUnknownQueue) || !strings.Contains(err.Error(), name) {
		t.Errorf("Defer to %s: %v, want ErrUnknownQueue naming the queue", name, err)
	}
}
