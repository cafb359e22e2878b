// Package backendtest is the contract suite that every backend.Backend passes.
//
// A backend's own tests call Run with a constructor; each rule of the contract is a
// named subtest, so a failure names the rule that broke:
//
//	func TestContract(t *testing.T) {
//		backendtest.Run(t, backendtest.Options{
//			New:      func(t *testing.T) backend.Backend { return memory.New(memory.Config{}) },
//			Synctest: true,
//		})
//	}
//
// A rule that needs a capability a backend may lack (backend.Capabilities: priority
// ordering, and with it defer-to-the-front) runs only on backends that declare it, and
// is skipped, saying so, on the others.
//
// The suite also requires backend.DeadLetterStore and backend.StatsReader, which every
// backend of the project implements. The rules of the optional interfaces
// (backend.BatchPublisher, backend.AtomicDelivery, backend.JobRecordReader) run only on
// backends that implement them and are skipped, saying so, on the others.
//
// Nothing here proves with a sleep that something did not happen. In a synctest bubble
// the suite waits out its quiet periods in virtual time. On a real broker it uses
// positive signals: a marker published after the fact and received next proves that
// nothing was deliverable before it, and the queue's stats prove what the backend holds
// back under a full prefetch.
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Options configures a run of the suite.
type Options struct {
	// New returns a fresh backend for one subtest. The suite closes it at the end of the
	// subtest. Queue names are unique per subtest, so backends may share a broker.
	New func(t *testing.T) backend.Backend
	// Synctest runs every subtest inside a testing/synctest bubble, in virtual time:
	// for backends whose timers come from the time package.
	Synctest bool
	// Quiet is how long, in virtual time, the suite waits in a synctest bubble to be
	// sure that nothing more arrives. Zero means 300 ms. Without Synctest the suite
	// uses markers and queue stats instead (see the package comment).
	Quiet time.Duration
	// Timeout bounds every wait for a delivery. Zero means 15 s.
	Timeout time.Duration
	// Parallel runs the subtests in parallel.
	Parallel bool
}

// rule is one rule of the contract.
type rule struct {
	name string
	fn   func(t *testing.T, h *harness)
}

// needs names the rules that need a capability: they run only on backends that declare
// it (backend.CapabilitiesOf) and are skipped, saying so, on the others.
var needs = map[string]backend.Capabilities{
	"PriorityHighestFirstFIFOAmongEquals": backend.CapPriority,
	"DeferredAheadOfBacklogDelayedBehind": backend.CapPriority,
}

var rules = []rule{
	{"DeclareIsIdempotent", testDeclareIsIdempotent},
	{"RoundTripIsExact", testRoundTripIsExact},
	{"Prefetch1BoundsUnsettled", func(t *testing.T, h *harness) { testPrefetch(t, h, 1) }},
	{"Prefetch8BoundsUnsettled", func(t *testing.T, h *harness) { testPrefetch(t, h, 8) }},
	{"DelaysNeverFireEarly", testDelaysNeverFireEarly},
	{"ShortDelayNotHeldBehindLong", testShortDelayNotHeldBehindLong},
	{"PriorityHighestFirstFIFOAmongEquals", testPriority},
	{"DeferredAheadOfBacklogDelayedBehind", testDeferredAheadDelayedBehind},
	{"DropLosesNothing", testDropLosesNothing},
	{"SettleTwiceFailsAndChangesNothing", testSettleTwice},
	{"SettlePublishesFirstThenAcks", testSettlePublishesFirst},
	{"CloseEndsStreamsAndRefusesWork", testClose},
	{"DelayedPublishToUnknownQueueFails", testUnknownQueue},
	{"ConcurrentNoLossNoDuplicates", testConcurrent},
	{"DeadLettersInspectReplayPurge", testDeadLetters},
}

// Run runs every rule of the contract as a subtest of t.
func Run(t *testing.T, o Options) {
	if o.New == nil {
		t.Fatal("backendtest.Run: Options.New is nil")
	}
	if o.Quiet == 0 {
		o.Quiet = 300 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Second
	}
	for _, r := range append(slices.Clone(rules), optionalRules...) {
		t.Run(r.name, func(t *testing.T) {
			if o.Parallel {
				t.Parallel()
			}
			body := func(t *testing.T) {
				b := o.New(t)
				if missing := needs[r.name] &^ backend.CapabilitiesOf(b); missing != 0 {
					ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
					defer cancel()
					if err := b.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
					t.Skipf("%T does not declare the capability %v (backend.CapabilityReporter)", b, missing)
				}
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
					defer cancel()
					if err := b.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
				}()
				r.fn(t, &harness{b: b, o: o, prefix: "bt-" + r.name + "-" + randomHex()})
			}
			if o.Synctest {
				synctest.Test(t, body)
			} else {
				body(t)
			}
		})
	}
}

func randomHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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
	h.n++
	q := backend.QueueConfig{Name: h.prefix + "-" + string(rune('a'+h.n-1)), Prefetch: prefetch, PriorityLevels: levels}
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

func testDeclareIsIdempotent(t *testing.T, h *harness) {
	q := h.declare(t, 4, 2)
	h.publish(t, job(q, "kept"), 0)
	for range 3 {
		if err := h.b.Declare(h.ctx(), q); err != nil {
			t.Fatalf("declaring %s again: %v", q.Name, err)
		}
	}
	s := h.consume(t, q)
	d, env := h.receive(t, s)
	if string(env.Payload) != "kept" {
		t.Fatalf("payload = %q, want %q", env.Payload, "kept")
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
}

func testRoundTripIsExact(t *testing.T, h *harness) {
	q := h.declare(t, 4, 3)
	payload := make([]byte, 0, 512)
	for i := range 512 {
		payload = append(payload, byte(i))
	}
	want := backend.Envelope{
		ID:          backend.NewID(),
		Queue:       q.Name,
		Payload:     payload,
		Headers:     map[string]string{"Trace-Id": "abc", "trace-id": "lower", "ünïcode": "värde ✓", "empty": ""},
		Priority:    2,
		Attempt:     3,
		MaxAttempts: 7,
		Defers:      2,
		EnqueuedAt:  time.Date(2026, 11, 30, 6, 7, 8, 123456789, time.UTC),
		Reason:      "last failure: \"quoted\"\nsecond line",
	}
	sent := want.Clone()
	h.publish(t, sent, 0)
	sent.Payload[0] = 0xFF // the backend must have kept its own copy
	sent.Headers["Trace-Id"] = "changed"
	empty := backend.NewEnvelope(q.Name, nil)
	h.publish(t, empty, 0)

	s := h.consume(t, q)
	d, got := h.receive(t, s)
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	if got.ID != want.ID || got.Queue != want.Queue || string(got.Payload) != string(want.Payload) ||
		got.Priority != want.Priority || got.Attempt != want.Attempt || got.MaxAttempts != want.MaxAttempts ||
		got.Defers != want.Defers || !got.EnqueuedAt.Equal(want.EnqueuedAt) || got.Reason != want.Reason ||
		got.Redelivered {
		t.Fatalf("round trip changed the envelope:\n got %+v\nwant %+v", got, want)
	}
	if len(got.Headers) != len(want.Headers) {
		t.Fatalf("headers = %q, want %q", got.Headers, want.Headers)
	}
	for k, v := range want.Headers {
		if gv, ok := got.Headers[k]; !ok || gv != v {
			t.Fatalf("header %q = %q (present %v), want %q", k, gv, ok, v)
		}
	}
	d, got = h.receive(t, s)
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	if got.ID != empty.ID || len(got.Payload) != 0 || len(got.Headers) != 0 {
		t.Fatalf("empty job came back as %+v", got)
	}
}

func testPrefetch(t *testing.T, h *harness, prefetch int) {
	q := h.declare(t, prefetch, 0)
	const total = 20
	for i := range total {
		h.publish(t, job(q, string(rune('A'+i))), 0)
	}
	s := h.consume(t, q)
	var held []backend.Delivery
	for range prefetch {
		d, _ := h.receive(t, s)
		held = append(held, d)
	}
	h.expectHeldBack(t, q, s, total-prefetch) // prefetch reached: no more until one is settled
	received := prefetch
	for len(held) > 0 {
		mustSettle(t, "Ack", held[0].Ack(h.ctx()))
		held = held[1:]
		if received < total {
			d, _ := h.receive(t, s)
			held = append(held, d)
			received++
			h.expectHeldBack(t, q, s, total-received)
		}
	}
	if received != total {
		t.Fatalf("received %d, want %d", received, total)
	}
}

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

func testPriority(t *testing.T, h *harness) {
	q := h.declare(t, 1, 2)
	for i, p := range []uint8{0, 1, 2, 0, 2, 1, 9} {
		env := job(q, string(rune('a'+i)))
		env.Priority = p
		h.publish(t, env, 0)
	}
	// 9 counts as the highest level (2): after the earlier 2s.
	got := strings.Join(h.drainInOrder(t, q, 7), "")
	if want := "cegbfad"; got != want {
		t.Fatalf("delivery order %q, want %q (priority first, FIFO among equals)", got, want)
	}
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

func testDropLosesNothing(t *testing.T, h *harness) {
	q := h.declare(t, 4, 0)
	const total = 10
	for i := range total {
		h.publish(t, job(q, string(rune('a'+i))), 0)
	}
	s := h.consume(t, q)
	var taken []backend.Delivery
	for range 2 {
		d, _ := h.receive(t, s)
		taken = append(taken, d)
	}
	// Let the backend pull what the prefetch allows, so that Drop has buffered
	// deliveries to return as well as taken ones.
	if h.o.Synctest {
		synctest.Wait()
	} else {
		// A broker pushes up to the prefetch; a backend whose stream hands out only what
		// a consumer takes (an unbuffered channel) holds nothing beyond the taken ones.
		h.waitStats(t, q, "prefetch filled", func(st backend.QueueStats) bool {
			return st.Pending == total-q.Prefetch || (st.Unacked == len(taken) && st.Pending == total-len(taken))
		})
	}
	s.Drop()
	for range s.Deliveries() { // whatever was buffered is not ours any more
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after Drop = %v, want nil", err)
	}
	if err := taken[0].Ack(h.ctx()); !errors.Is(err, backend.ErrStreamClosed) {
		t.Fatalf("Ack after Drop = %v, want ErrStreamClosed", err)
	}

	s2 := h.consume(t, backend.QueueConfig{Name: q.Name, Prefetch: 16})
	seen := make(map[string]bool)
	redelivered := 0
	for range total {
		d, env := h.receive(t, s2)
		if seen[env.ID] {
			t.Fatalf("job %q delivered twice", env.Payload)
		}
		seen[env.ID] = true
		if env.Redelivered {
			redelivered++
		}
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	if redelivered < len(taken) {
		t.Fatalf("%d jobs marked redelivered, want at least the %d taken before Drop", redelivered, len(taken))
	}
	h.expectNothing(t, q, s2)
}

func testSettleTwice(t *testing.T, h *harness) {
	q := h.declare(t, 8, 0)
	for _, p := range []string{"acked", "dead", "retried"} {
		h.publish(t, job(q, p), 0)
	}
	s := h.consume(t, q)
	byPayload := make(map[string]backend.Delivery)
	envs := make(map[string]backend.Envelope)
	for range 3 {
		d, env := h.receive(t, s)
		byPayload[string(env.Payload)], envs[string(env.Payload)] = d, env
	}
	mustSettle(t, "Ack", byPayload["acked"].Ack(h.ctx()))
	mustSettle(t, "DeadLetter", byPayload["dead"].DeadLetter(h.ctx(), "first reason"))
	next := envs["retried"]
	next.Attempt++
	mustSettle(t, "Retry", byPayload["retried"].Retry(h.ctx(), next, 0))

	for name, d := range byPayload {
		again := map[string]error{
			"Ack":        d.Ack(h.ctx()),
			"Retry":      d.Retry(h.ctx(), envs[name], 0),
			"Defer":      d.Defer(h.ctx(), envs[name], time.Millisecond),
			"DeadLetter": d.DeadLetter(h.ctx(), "second reason"),
		}
		for op, err := range again {
			if !errors.Is(err, backend.ErrAlreadySettled) {
				t.Errorf("%s of the %s delivery: %v, want ErrAlreadySettled", op, name, err)
			}
		}
	}
	d, env := h.receive(t, s) // the one retry
	if env.ID != next.ID || env.Attempt != next.Attempt {
		t.Fatalf("got %+v, want the retried job at attempt %d", env, next.Attempt)
	}
	mustSettle(t, "Ack", d.Ack(h.ctx()))
	h.expectNothing(t, q, s)
	dead := h.deadLetters(t, q)
	if len(dead) != 1 || dead[0].Reason != "first reason" {
		t.Fatalf("dead letters = %+v, want one with reason %q", dead, "first reason")
	}
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

func testSettlePublishesFirst(t *testing.T, h *harness) {
	q := h.declare(t, 8, 1)
	for _, p := range []string{"retry", "defer", "dead"} {
		h.publish(t, job(q, p), 0)
	}
	nowhere := h.prefix + "-never-declared"
	s := h.consume(t, q)
	for range 3 {
		d, env := h.receive(t, s)
		if string(env.Payload) == "dead" {
			continue
		}
		bad := env
		bad.Queue = nowhere
		var err error
		if string(env.Payload) == "retry" {
			err = d.Retry(h.ctx(), bad, 0)
		} else {
			err = d.Defer(h.ctx(), bad, time.Millisecond)
		}
		if !errors.Is(err, backend.ErrUnknownQueue) {
			t.Fatalf("%s to an undeclared queue: %v, want ErrUnknownQueue", env.Payload, err)
		}
	}
	s.Drop() // the failed settles left their deliveries unacknowledged: all three return

	s = h.consume(t, q)
	got := make(map[string]backend.Envelope)
	for range 3 {
		d, env := h.receive(t, s)
		if !env.Redelivered {
			t.Errorf("%s came back without the redelivered mark", env.Payload)
		}
		got[string(env.Payload)] = env
		next := env
		next.Attempt++
		next.Reason = "because " + string(env.Payload)
		switch string(env.Payload) {
		case "retry":
			mustSettle(t, "Retry", d.Retry(h.ctx(), next, 0))
		case "defer":
			next.Priority = 1
			mustSettle(t, "Defer", d.Defer(h.ctx(), next, 50*time.Millisecond))
		case "dead":
			mustSettle(t, "DeadLetter", d.DeadLetter(h.ctx(), "because dead"))
		}
	}
	if len(got) != 3 {
		t.Fatalf("redelivered %d distinct jobs, want 3", len(got))
	}
	for range 2 {
		d, env := h.receive(t, s)
		if env.Reason != "because "+string(env.Payload) || env.Attempt != got[string(env.Payload)].Attempt+1 {
			t.Errorf("republished %s as %+v", env.Payload, env)
		}
		mustSettle(t, "Ack", d.Ack(h.ctx()))
	}
	h.expectNothing(t, q, s)
	s.Drop()
	h.expectNothing(t, q, h.consume(t, q)) // the originals were acknowledged
	dead := h.deadLetters(t, q)
	if len(dead) != 1 || dead[0].Reason != "because dead" || string(dead[0].Envelope.Payload) != "dead" {
		t.Fatalf("dead letters = %+v", dead)
	}
}

func testClose(t *testing.T, h *harness) {
	q := h.declare(t, 4, 0)
	h.publish(t, job(q, "held"), 0)
	s := h.consume(t, q)
	d, _ := h.receive(t, s)
	ctx, cancel := context.WithTimeout(h.ctx(), h.o.Timeout)
	defer cancel()
	if err := h.b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case _, ok := <-s.Deliveries():
		if ok {
			t.Fatal("stream delivered after Close")
		}
	case <-time.After(h.o.Timeout):
		t.Fatal("stream did not end after Close")
	}
	if err := s.Err(); !errors.Is(err, backend.ErrShutDown) {
		t.Errorf("stream Err after Close = %v, want ErrShutDown", err)
	}
	checks := map[string]error{
		"Publish":         h.b.Publish(h.ctx(), job(q, "late"), 0),
		"delayed Publish": h.b.Publish(h.ctx(), job(q, "late"), time.Second),
		"Defer":           h.b.Defer(h.ctx(), job(q, "late"), time.Second),
		"Declare":         h.b.Declare(h.ctx(), q),
		"Ack":             d.Ack(h.ctx()),
	}
	_, err := h.b.Consume(h.ctx(), q)
	checks["Consume"] = err
	for op, err := range checks {
		if !errors.Is(err, backend.ErrShutDown) {
			t.Errorf("%s after Close: %v, want ErrShutDown", op, err)
		}
	}
	if err := h.b.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
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

func testConcurrent(t *testing.T, h *harness) {
	q := h.declare(t, 8, 0)
	const publishers, each, consumers = 4, 250, 3
	ids := make(chan string, publishers*each*2)
	var streams []backend.Stream
	var wg sync.WaitGroup
	defer func() {
		for _, s := range streams {
			s.Drop()
		}
		wg.Wait()
	}()
	for range consumers {
		s := h.consume(t, q)
		streams = append(streams, s)
		wg.Go(func() {
			for d := range s.Deliveries() {
				env, err := d.Envelope()
				if err != nil {
					t.Errorf("Envelope: %v", err)
				}
				if err := d.Ack(h.ctx()); err != nil {
					t.Errorf("Ack: %v", err)
				}
				ids <- env.ID
			}
		})
	}
	errs := make(chan error, publishers)
	for range publishers {
		go func() {
			for range each {
				if err := h.b.Publish(h.ctx(), job(q, "x"), 0); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range publishers {
		if err := <-errs; err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	seen := make(map[string]bool)
	timeout := time.After(h.o.Timeout)
	for len(seen) < publishers*each {
		select {
		case id := <-ids:
			if seen[id] {
				t.Fatalf("job %s delivered twice", id)
			}
			seen[id] = true
		case <-timeout:
			t.Fatalf("received %d of %d jobs", len(seen), publishers*each)
		}
	}
	if h.o.Synctest {
		select {
		case id := <-ids:
			t.Fatalf("extra delivery of %s", id)
		case <-time.After(h.o.Quiet):
		}
		return
	}
	// Nothing may come before a marker published now.
	marker := h.marker(t, q)
	select {
	case id := <-ids:
		if id != marker.ID {
			t.Fatalf("extra delivery of %s", id)
		}
	case <-time.After(h.o.Timeout):
		t.Fatal("the marker published after every job did not arrive")
	}
}

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
