package backendtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

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
		Key:         "account-42 ✓",
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
		got.Key != want.Key || got.Redelivered {
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
	if got.ID != empty.ID || len(got.Payload) != 0 || len(got.Headers) != 0 || got.Key != "" {
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
