package backendtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// declareKeys declares a queue whose jobs of one concurrency key run at most n at once.
func (h *harness) declareKeys(t *testing.T, prefetch, n int) backend.QueueConfig {
	t.Helper()
	return h.declareWith(t, backend.QueueConfig{Prefetch: prefetch, KeyConcurrency: n})
}

// keyed returns a fresh job of q with the concurrency key key, its payload its name.
func keyed(q backend.QueueConfig, key, name string) backend.Envelope {
	env := job(q, name)
	env.Key = key
	return env
}

// receiveNamed receives the next delivery of s and fails unless its payload is want.
func (h *harness) receiveNamed(t *testing.T, s backend.Stream, want string) (backend.Delivery, backend.Envelope) {
	t.Helper()
	d, env := h.receive(t, s)
	if string(env.Payload) != want {
		t.Fatalf("delivery %q, want %q", env.Payload, want)
	}
	return d, env
}

// ackNext receives the deliveries of s named by names, in order, acking each.
func (h *harness) ackNext(t *testing.T, s backend.Stream, names ...string) {
	t.Helper()
	for _, name := range names {
		d, _ := h.receiveNamed(t, s, name)
		mustSettle(t, "Ack "+name, d.Ack(h.ctx()))
	}
}

// testKeyConcurrencyRefusedWithout: a backend without CapKeyConcurrency refuses a
// queue that asks for it, with a reason, rather than ignore the bound; one with it
// takes it.
func testKeyConcurrencyRefusedWithout(t *testing.T, h *harness) {
	q := backend.QueueConfig{Name: h.prefix + "-k", KeyConcurrency: 1}
	err := h.b.Declare(h.ctx(), q)
	if backend.CapabilitiesOf(h.b)&backend.CapKeyConcurrency != 0 {
		if err != nil {
			t.Fatalf("Declare with KeyConcurrency on a backend that declares the capability: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%T lacks CapKeyConcurrency, yet declared a queue with KeyConcurrency 1", h.b)
	}
	if _, err := h.b.Consume(h.ctx(), q); err == nil {
		t.Fatalf("%T lacks CapKeyConcurrency, yet consumed a queue with KeyConcurrency 1", h.b)
	}
}

// testKeyBoundsRunningInPublishOrder: with KeyConcurrency 1 the first job of each key
// and the jobs without a key are handed out; a key's next job only once the one ahead
// of it ended, in the order they were published. The waiting ones hold no prefetch
// slot and are counted as KeyWaiting, not Pending.
func testKeyBoundsRunningInPublishOrder(t *testing.T, h *harness) {
	q := h.declareKeys(t, 8, 1)
	for _, j := range [][2]string{{"a", "a1"}, {"b", "b1"}, {"a", "a2"}, {"b", "b2"}, {"a", "a3"}, {"c", "c1"}, {"", "u1"}, {"", "u2"}} {
		h.publish(t, keyed(q, j[0], j[1]), 0)
	}
	s := h.consume(t, q)
	got := make(map[string]backend.Delivery)
	for range 5 {
		d, env := h.receive(t, s)
		got[string(env.Payload)] = d
	}
	for _, name := range []string{"a1", "b1", "c1", "u1", "u2"} {
		if got[name] == nil {
			t.Fatalf("received %v, want a1, b1, c1, u1 and u2: the first of each key and the jobs without one", keysOf(got))
		}
	}
	if st := h.stats(t, q); st.KeyWaiting != 3 || st.Pending != 0 {
		t.Fatalf("stats %+v, want 3 waiting for their key (a2, b2, a3) and none pending", st)
	}
	h.expectNothing(t, q, s) // three slots of the prefetch are free: nothing to fill them
	mustSettle(t, "Ack b1", got["b1"].Ack(h.ctx()))
	h.ackNext(t, s, "b2")
	mustSettle(t, "Ack a1", got["a1"].Ack(h.ctx()))
	d, _ := h.receiveNamed(t, s, "a2")
	h.expectNothing(t, q, s)
	mustSettle(t, "Ack a2", d.Ack(h.ctx()))
	h.ackNext(t, s, "a3")
	for _, name := range []string{"c1", "u1", "u2"} {
		mustSettle(t, "Ack "+name, got[name].Ack(h.ctx()))
	}
	if st := h.stats(t, q); st.KeyWaiting != 0 {
		t.Fatalf("stats %+v after every job ended, want none waiting", st)
	}
}

func keysOf(m map[string]backend.Delivery) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testKeyHeldWhileWaiting: a job keeps its key while it is retrying, deferred or
// delayed (from its publish): the key's next job is not handed out before it, and
// runs once it ended.
func testKeyHeldWhileWaiting(t *testing.T, h *harness) {
	q := h.declareKeys(t, 4, 1)
	const wait = 50 * time.Millisecond
	h.publish(t, keyed(q, "k", "delayed"), wait) // its place is from its publish
	h.publish(t, keyed(q, "k", "next"), 0)
	s := h.consume(t, q)
	if st := h.stats(t, q); st.KeyWaiting != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v, want next waiting for its key behind the delayed job", st)
	}
	d, env := h.receiveNamed(t, s, "delayed")
	env.Attempt++
	mustSettle(t, "Retry", d.Retry(h.ctx(), env, wait))
	d, env = h.receiveNamed(t, s, "delayed") // the retry, not next
	if env.Attempt != 2 {
		t.Fatalf("retried job came back at attempt %d, want 2", env.Attempt)
	}
	mustSettle(t, "Defer", d.Defer(h.ctx(), env, wait))
	d, _ = h.receiveNamed(t, s, "delayed") // the deferred one, not next
	mustSettle(t, "Retry without a delay", d.Retry(h.ctx(), env, 0))
	h.ackNext(t, s, "delayed", "next")
	h.expectNothing(t, q, s)
}

// testKeyLimitN: KeyConcurrency 2 hands out two jobs of a key at once, never a third.
func testKeyLimitN(t *testing.T, h *harness) {
	q := h.declareKeys(t, 8, 2)
	for i := range 5 {
		h.publish(t, keyed(q, "k", fmt.Sprint(i)), 0)
	}
	s := h.consume(t, q)
	d0, _ := h.receiveNamed(t, s, "0")
	d1, _ := h.receiveNamed(t, s, "1")
	h.expectNothing(t, q, s)
	if st := h.stats(t, q); st.KeyWaiting != 3 {
		t.Fatalf("stats %+v, want 3 waiting for their key", st)
	}
	mustSettle(t, "Ack", d1.Ack(h.ctx()))
	d2, _ := h.receiveNamed(t, s, "2")
	h.expectNothing(t, q, s)
	mustSettle(t, "DeadLetter", d0.DeadLetter(h.ctx(), "test")) // a dead letter ends its job too
	d3, _ := h.receiveNamed(t, s, "3")
	mustSettle(t, "Ack", d2.Ack(h.ctx()))
	d4, _ := h.receiveNamed(t, s, "4")
	for _, d := range []backend.Delivery{d3, d4} {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
}

// testKeyLimitChangesWithDeclare: the latest Declare sets the bound, for the jobs
// already queued too; a stream dropped with a key's job unsettled gives it back at the
// head of its key.
func testKeyLimitChangesWithDeclare(t *testing.T, h *harness) {
	q := h.declareKeys(t, 4, 0)
	for _, name := range []string{"k1", "k2", "k3"} {
		h.publish(t, keyed(q, "k", name), 0)
	}
	q.KeyConcurrency = 1
	if err := h.b.Declare(h.ctx(), q); err != nil {
		t.Fatalf("Declare with KeyConcurrency 1: %v", err)
	}
	s := h.consume(t, q)
	h.receiveNamed(t, s, "k1")
	h.expectNothing(t, q, s)
	s.Drop()
	s = h.consume(t, q)
	d1, env := h.receiveNamed(t, s, "k1")
	if !env.Redelivered {
		t.Fatal("the job of a dropped stream came back not marked redelivered")
	}
	h.expectNothing(t, q, s)
	q.KeyConcurrency = 0
	if err := h.b.Declare(h.ctx(), q); err != nil {
		t.Fatalf("Declare with KeyConcurrency 0: %v", err)
	}
	d2, _ := h.receiveNamed(t, s, "k2")
	d3, _ := h.receiveNamed(t, s, "k3")
	for _, d := range []backend.Delivery{d1, d2, d3} {
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
}

// testKeyFreedByJobControl: cancelling or deleting a waiting job of a key frees its
// place, whether it held the key (retrying) or waited for it.
func testKeyFreedByJobControl(t *testing.T, h *harness) {
	jc := implements[backend.JobController](t, h)
	q := h.declareKeys(t, 4, 1)
	jobs := make(map[string]backend.Envelope)
	for _, name := range []string{"k1", "k2", "k3", "k4", "k5"} {
		jobs[name] = keyed(q, "k", name)
		h.publish(t, jobs[name], 0)
	}
	s := h.consume(t, q)
	d, env := h.receiveNamed(t, s, "k1")
	env.Attempt++
	mustSettle(t, "Retry", d.Retry(h.ctx(), env, time.Hour))
	h.expectNothing(t, q, s) // k1, retrying, holds the key
	mustSettle(t, "CancelJob of the retrying job", jc.CancelJob(h.ctx(), env.ID))
	h.ackNext(t, s, "k2")
	d, _ = h.receiveNamed(t, s, "k3")
	// k4 waits for its key behind k3: deleting it frees its place, and k5 is next.
	mustSettle(t, "DeleteJob of a job waiting for its key", jc.DeleteJob(h.ctx(), jobs["k4"].ID))
	if st := h.stats(t, q); st.KeyWaiting != 1 {
		t.Fatalf("stats %+v after k4 was deleted, want k5 alone waiting for its key", st)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.ackNext(t, s, "k5")
	h.expectNothing(t, q, s)
}

// testKeysUnderConcurrency: streams take jobs of a few keys at once and retry some:
// never two jobs of one key at once, and each key's jobs start in publish order (a
// retry starts again before the key's next job).
func testKeysUnderConcurrency(t *testing.T, h *harness) {
	q := h.declareKeys(t, 8, 1)
	const keys, perKey = 5, 20
	for i := range perKey {
		for k := range keys {
			h.publish(t, keyed(q, fmt.Sprint("key", k), fmt.Sprint(i)), 0)
		}
	}
	var mu sync.Mutex
	running := make(map[string]bool)
	started := make(map[string][]string) // key -> payloads in start order
	done := 0
	var wg sync.WaitGroup
	var firstErr error // the first consumer's failure, under mu
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for c := range 3 {
		s := h.consume(t, q)
		rng := rand.New(rand.NewPCG(uint64(c), 7))
		wg.Go(func() {
			settleEach(s, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return done == keys*perKey || firstErr != nil
			}, fail, func(d backend.Delivery, env backend.Envelope) error {
				mu.Lock()
				if running[env.Key] {
					mu.Unlock()
					return fmt.Errorf("job %s of %s handed out while another of its key runs", env.Payload, env.Key)
				}
				running[env.Key] = true
				if l := started[env.Key]; env.Attempt == 1 || len(l) == 0 || l[len(l)-1] != string(env.Payload) {
					started[env.Key] = append(l, string(env.Payload))
				}
				mu.Unlock()
				retry := env.Attempt == 1 && rng.IntN(4) == 0
				mu.Lock()
				running[env.Key] = false
				if !retry {
					done++
				}
				mu.Unlock()
				if retry {
					env.Attempt++
					return d.Retry(h.ctx(), env, time.Millisecond)
				}
				return d.Ack(h.ctx())
			})
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	for k := range keys {
		key := fmt.Sprint("key", k)
		l := started[key]
		if len(l) != perKey {
			t.Fatalf("%s started %d jobs (retries counted once), want %d: %v", key, len(l), perKey, l)
		}
		for i, p := range l {
			if p != fmt.Sprint(i) {
				t.Fatalf("%s started its jobs in the order %v, want publish order", key, l)
			}
		}
	}
}
