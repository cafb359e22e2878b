package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// harness holds one subtest's backend and helpers.
type harness struct {
	b      backend.Backend
	o      Options
	prefix string
	n      int
}

func (h *harness) ctx() context.Context { return context.Background() }

// declare declares a queue with a unique name and returns its config.
func (h *harness) declare(t *testing.T, prefetch, levels int) backend.QueueConfig {
	t.Helper()
	return h.declareWith(t, backend.QueueConfig{Prefetch: prefetch, PriorityLevels: levels})
}

// declareWith declares q under a unique name and returns it.
func (h *harness) declareWith(t *testing.T, q backend.QueueConfig) backend.QueueConfig {
	t.Helper()
	h.n++
	q.Name = h.prefix + "-" + string(rune('a'+h.n-1))
	if err := h.b.Declare(h.ctx(), q); err != nil {
		t.Fatalf("Declare(%+v): %v", q, err)
	}
	return q
}

func (h *harness) publish(t *testing.T, env backend.Envelope, delay time.Duration) {
	t.Helper()
	if err := h.b.Publish(h.ctx(), env, delay); err != nil {
		t.Fatalf("Publish(%s, %v): %v", env.ID, delay, err)
	}
}

func (h *harness) consume(t *testing.T, q backend.QueueConfig) backend.Stream {
	t.Helper()
	s, err := h.b.Consume(h.ctx(), q)
	if err != nil {
		t.Fatalf("Consume(%s): %v", q.Name, err)
	}
	t.Cleanup(s.Drop)
	return s
}

// receive waits for the next delivery and decodes it.
func (h *harness) receive(t *testing.T, s backend.Stream) (backend.Delivery, backend.Envelope) {
	t.Helper()
	select {
	case d, ok := <-s.Deliveries():
		if !ok {
			t.Fatalf("stream ended while a delivery was expected: %v", s.Err())
		}
		env, err := d.Envelope()
		if err != nil {
			t.Fatalf("Envelope: %v", err)
		}
		return d, env
	case <-time.After(h.o.Timeout):
		t.Fatalf("no delivery within %v", h.o.Timeout)
	}
	panic("unreachable")
}

// expectNothing asserts that s, a stream of q, has nothing more to deliver. In a
// synctest bubble it waits the quiet period in virtual time. On a real backend it
// publishes a marker at the lowest priority to q and receives: whatever was deliverable
// comes before the marker, so the marker coming next proves there was nothing. s must
// have room under its prefetch for the marker.
func (h *harness) expectNothing(t *testing.T, q backend.QueueConfig, s backend.Stream) {
	t.Helper()
	if h.o.Synctest {
		select {
		case d, ok := <-s.Deliveries():
			if ok {
				env, _ := d.Envelope()
				t.Fatalf("unexpected delivery %s (payload %q)", env.ID, env.Payload)
			}
			t.Fatalf("stream ended unexpectedly: %v", s.Err())
		case <-time.After(h.o.Quiet):
		}
		return
	}
	marker := h.marker(t, q)
	d, env := h.receive(t, s)
	if env.ID != marker.ID {
		t.Fatalf("unexpected delivery %s (payload %q) before the marker published after the last expected one", env.ID, env.Payload)
	}
	mustSettle(t, "Ack of the marker", d.Ack(h.ctx()))
}

// marker publishes a marker job at the lowest priority to q.
func (h *harness) marker(t *testing.T, q backend.QueueConfig) backend.Envelope {
	t.Helper()
	m := job(q, "marker")
	h.publish(t, m, 0)
	return m
}

// expectHeldBack asserts that the backend holds back q's remaining messages while s's
// prefetch is full: in a synctest bubble nothing is delivered for the quiet period (in
// virtual time); on a real backend the queue still counts pending as ready, so it
// handed out no more than the prefetch.
func (h *harness) expectHeldBack(t *testing.T, q backend.QueueConfig, s backend.Stream, pending int) {
	t.Helper()
	if h.o.Synctest {
		h.expectNothing(t, q, s)
		return
	}
	st := h.stats(t, q)
	if st.Pending != pending {
		t.Fatalf("with the prefetch (%d) full, the queue has %d ready, want %d: the backend handed out more than its prefetch", q.Prefetch, st.Pending, pending)
	}
	select {
	case d, ok := <-s.Deliveries():
		if ok {
			env, _ := d.Envelope()
			t.Fatalf("delivery %s (payload %q) beyond the prefetch of %d", env.ID, env.Payload, q.Prefetch)
		}
		t.Fatalf("stream ended unexpectedly: %v", s.Err())
	default:
	}
}

func (h *harness) stats(t *testing.T, q backend.QueueConfig) backend.QueueStats {
	t.Helper()
	sr, ok := h.b.(backend.StatsReader)
	if !ok {
		t.Fatalf("%T does not implement backend.StatsReader", h.b)
	}
	st, err := sr.QueueStats(h.ctx(), q.Name)
	if err != nil {
		t.Fatalf("QueueStats(%s): %v", q.Name, err)
	}
	return st
}

// waitStats polls q's stats until cond holds of them.
func (h *harness) waitStats(t *testing.T, q backend.QueueConfig, what string, cond func(backend.QueueStats) bool) {
	t.Helper()
	deadline := time.Now().Add(h.o.Timeout)
	for {
		st := h.stats(t, q)
		if cond(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %s has %+v", what, h.o.Timeout, q.Name, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustSettle(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// job returns a fresh envelope for q with a text payload.
func job(q backend.QueueConfig, payload string) backend.Envelope {
	return backend.NewEnvelope(q.Name, []byte(payload))
}

// drainInOrder consumes n deliveries with prefetch 1, acking each, and returns their
// payloads in order.
func (h *harness) drainInOrder(t *testing.T, q backend.QueueConfig, n int) []string {
	t.Helper()
	q.Prefetch = 1
	s := h.consume(t, q)
	var got []string
	for range n {
		d, env := h.receive(t, s)
		got = append(got, string(env.Payload))
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	h.expectNothing(t, q, s)
	return got
}

func (h *harness) deadLetters(t *testing.T, q backend.QueueConfig) []backend.DeadLetter {
	t.Helper()
	store, ok := h.b.(backend.DeadLetterStore)
	if !ok {
		t.Fatalf("%T does not implement backend.DeadLetterStore", h.b)
	}
	dead, err := store.DeadLetters(h.ctx(), q.Name, 0)
	if err != nil {
		t.Fatalf("DeadLetters(%s): %v", q.Name, err)
	}
	return dead
}

// atomicDelivery receives the next delivery of s and skips the test unless it is an
// AtomicDelivery.
func (h *harness) atomicDelivery(t *testing.T, s backend.Stream) (backend.AtomicDelivery, backend.Envelope) {
	t.Helper()
	d, env := h.receive(t, s)
	ad, ok := d.(backend.AtomicDelivery)
	if !ok {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
		t.Skipf("%T's deliveries do not implement backend.AtomicDelivery", h.b)
	}
	return ad, env
}

// settleEach receives the deliveries of s and hands each to settle until finished
// says the work is done: the body of a consumer goroutine of the concurrency rules. A
// stream that ends, an envelope that does not decode and settle's error go to fail,
// and end it.
func settleEach(s backend.Stream, finished func() bool, fail func(error), settle func(backend.Delivery, backend.Envelope) error) {
	for !finished() {
		var d backend.Delivery
		select {
		case d = <-s.Deliveries():
		case <-time.After(100 * time.Millisecond):
			continue
		}
		if d == nil {
			fail(fmt.Errorf("stream ended: %v", s.Err()))
			return
		}
		env, err := d.Envelope()
		if err == nil {
			err = settle(d, env)
		}
		if err != nil {
			fail(err)
			return
		}
	}
}
