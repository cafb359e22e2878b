package memory_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	"github.com/wasmjobs/wasmjobs/backend/memory"
)

func TestContract(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Options{
		New:      func(t *testing.T) backend.Backend { return memory.New(memory.Config{}) },
		Synctest: true,
		Parallel: true,
	})
}

// declared returns a memory backend, closed when the test ends, with q declared and a
// job published to it for each payload, in order.
func declared(t *testing.T, q backend.QueueConfig, payloads ...string) *memory.Backend {
	t.Helper()
	ctx := context.Background()
	b := memory.New(memory.Config{})
	t.Cleanup(func() { rig.Close(t, b) })
	rig.Must(t, b.Declare(ctx, q))
	for _, p := range payloads {
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope(q.Name, []byte(p)), 0))
	}
	return b
}

// expectBack checks that b's queue "jobs" holds its one job pending again, with no
// delivery unacknowledged.
func expectBack(t *testing.T, b *memory.Backend) {
	t.Helper()
	st, err := b.Stats("jobs")
	rig.Must(t, err)
	if st.Pending != 1 || st.Unacked != 0 {
		t.Fatalf("Stats = %+v, want the job back in the queue", st)
	}
}

// TestAReadDeliveryIsNoLongerPending: once a consumer has read a delivery's envelope,
// the queue's stats never count it as pending (the pebble backend's test of the same).
func TestAReadDeliveryIsNoLongerPending(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	defer rig.Close(t, b)
	rig.ReadIsNotPending(t, b, "q", 20000)
}

func TestInjectMalformedDecodesWithError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := backend.QueueConfig{Name: "jobs"}
		b := declared(t, q)
		rig.Must(t, b.InjectMalformed(ctx, "jobs", []byte{0xde, 0xad}, "no message id"))
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		env, err := d.Envelope()
		if !errors.Is(err, backend.ErrMalformed) || !strings.Contains(err.Error(), "no message id") {
			t.Fatalf("Envelope error = %v, want ErrMalformed naming the problem", err)
		}
		if env.ID == "" || env.Queue != "jobs" || !bytes.Equal(env.Payload, []byte{0xde, 0xad}) {
			t.Fatalf("partial envelope = %+v", env)
		}
		reason := err.Error()
		rig.Must(t, d.DeadLetter(ctx, reason))
		dead, err := b.DeadLetters(ctx, "jobs", 0)
		rig.Must(t, err)
		if len(dead) != 1 || dead[0].Reason != reason {
			t.Fatalf("dead letters = %+v", dead)
		}
		if err := b.InjectMalformed(ctx, "nowhere", nil, "x"); !errors.Is(err, backend.ErrUnknownQueue) {
			t.Fatalf("InjectMalformed to an undeclared queue: %v", err)
		}
	})
}

func TestStatsAndPending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := backend.QueueConfig{Name: "jobs", Prefetch: 2, PriorityLevels: 1}
		b := declared(t, q)
		for i, p := range []uint8{0, 1, 0} {
			env := backend.NewEnvelope("jobs", []byte{'a' + byte(i)})
			env.Priority = p
			rig.Must(t, b.Publish(ctx, env, 0))
		}
		rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte("later")), time.Minute))
		rig.Must(t, b.Defer(ctx, backend.NewEnvelope("jobs", []byte("held")), time.Minute))
		rig.Must(t, b.Defer(ctx, backend.NewEnvelope("jobs", []byte("now")), 0))

		pending, err := b.Pending("jobs")
		rig.Must(t, err)
		var order []string
		for _, env := range pending {
			order = append(order, string(env.Payload))
		}
		if got, want := strings.Join(order, ","), "b,a,c,now"; got != want {
			t.Fatalf("Pending order = %s, want %s", got, want)
		}

		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		rig.Must(t, d.Ack(ctx))
		d = <-s.Deliveries()
		rig.Must(t, d.DeadLetter(ctx, ""))
		d = <-s.Deliveries() // unsettled
		synctest.Wait()
		got, err := b.Stats("jobs")
		rig.Must(t, err)
		// The last one is offered by the stream and not taken: it counts as pending.
		want := memory.QueueStats{Pending: 1, Unacked: 1, Delayed: 1, Deferred: 1, Acked: 1, Dead: 1}
		if got != want {
			t.Fatalf("Stats = %+v, want %+v", got, want)
		}
		dead, err := b.DeadLetters(ctx, "jobs", 0)
		rig.Must(t, err)
		if dead[0].Reason == "" {
			t.Fatal("a dead letter without a reason must get one")
		}
		if _, err := b.Stats("nowhere"); !errors.Is(err, backend.ErrUnknownQueue) {
			t.Fatalf("Stats of an undeclared queue: %v", err)
		}
		if _, err := b.Pending("nowhere"); !errors.Is(err, backend.ErrUnknownQueue) {
			t.Fatalf("Pending of an undeclared queue: %v", err)
		}
		_ = d
	})
}

func TestContextEndsStreamAndReleases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := backend.QueueConfig{Name: "jobs", Prefetch: 1}
		b := declared(t, q, "x")
		ctx, cancel := context.WithCancel(t.Context())
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		cancel()
		if _, ok := <-s.Deliveries(); ok {
			t.Fatal("delivery after cancel")
		}
		if !errors.Is(s.Err(), context.Canceled) {
			t.Fatalf("Err = %v, want context.Canceled", s.Err())
		}
		if err := d.Ack(t.Context()); !errors.Is(err, backend.ErrStreamClosed) {
			t.Fatalf("Ack after the stream ended = %v, want ErrStreamClosed", err)
		}
		expectBack(t, b)
	})
}

func TestFailedSettleAfterStreamEndedReleases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := backend.QueueConfig{Name: "jobs", Prefetch: 1}
		b := declared(t, q, "x")
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries()
		env, _ := d.Envelope()
		env.Queue = "nowhere"
		// The settle fails on the unknown queue; a stream dropped meanwhile must get
		// the delivery back to the queue rather than strand it.
		errc := make(chan error)
		go func() { errc <- d.Retry(ctx, env, 0) }()
		s.Drop()
		if err := <-errc; !errors.Is(err, backend.ErrUnknownQueue) && !errors.Is(err, backend.ErrStreamClosed) {
			t.Fatalf("Retry = %v", err)
		}
		expectBack(t, b)
	})
}

// TestConflictingDeclarationFailsLikeABroker: a queue declared again with other
// priority levels is refused with an error naming both, and keeps its first
// declaration and its messages, as RabbitMQ does; the same declaration, or one that
// differs only in prefetch, is accepted.
func TestConflictingDeclarationFailsLikeABroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := declared(t, backend.QueueConfig{Name: "jobs", Prefetch: 2, PriorityLevels: 2})
	env := backend.NewEnvelope("jobs", []byte("kept"))
	env.Priority = 2
	rig.Must(t, b.Publish(ctx, env, 0))
	for _, tc := range []struct {
		levels, prefetch int
		want             string
	}{
		{2, 2, ""},
		{2, 7, ""},
		{5, 2, `queue "jobs" exists with 2 priority levels, not the 5 wanted: it keeps its first declaration`},
		{0, 2, `queue "jobs" exists with 2 priority levels, not the 0 wanted: it keeps its first declaration`},
	} {
		err := b.Declare(ctx, backend.QueueConfig{Name: "jobs", Prefetch: tc.prefetch, PriorityLevels: tc.levels})
		if got := errString(err); got != tc.want {
			t.Errorf("Declare(levels %d, prefetch %d) = %q, want %q", tc.levels, tc.prefetch, got, tc.want)
		}
	}
	if p, err := b.Pending("jobs"); err != nil || len(p) != 1 || string(p[0].Payload) != "kept" || p[0].Priority != 2 {
		t.Fatalf("after the conflicts the queue holds %+v, %v: want the one job it had", p, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestConfigIsClampedNeverPanics(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := memory.New(memory.Config{Granularity: time.Microsecond, Logger: log})
		defer b.Close(ctx)
		for _, q := range []backend.QueueConfig{
			{Name: "neg", Prefetch: -3, PriorityLevels: -1},
			{Name: "big", Prefetch: 1 << 20, PriorityLevels: 300},
		} {
			rig.Must(t, b.Declare(ctx, q))
			env := backend.NewEnvelope(q.Name, nil)
			env.Priority = 255
			start := time.Now()
			rig.Must(t, b.Publish(ctx, env, 1500*time.Microsecond))
			s, err := b.Consume(ctx, q)
			rig.Must(t, err)
			d := <-s.Deliveries()
			// 1.5 ms rounded up to the clamped 1 ms granularity: 2 ms, never earlier.
			if waited := time.Since(start); waited != 2*time.Millisecond {
				t.Errorf("%s: delivered after %v, want 2ms", q.Name, waited)
			}
			rig.Must(t, d.Ack(ctx))
			s.Drop()
		}
	})
	for _, want := range []string{"granularity clamped", "field=Prefetch from=-3 to=1", "field=PriorityLevels from=300 to=10", "from=1048576 to=65535"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	b := memory.New(memory.Config{})
	for _, name := range []string{"", "has space", "x.dead", strings.Repeat("a", 201)} {
		if err := b.Declare(context.Background(), backend.QueueConfig{Name: name}); err == nil {
			t.Errorf("Declare(%q) succeeded", name)
		}
	}
}

func TestManyMessagesGrowTheRing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := backend.QueueConfig{Name: "jobs", Prefetch: 100}
		b := declared(t, q)
		const n = 1000
		for i := range n {
			rig.Must(t, b.Publish(ctx, backend.NewEnvelope("jobs", []byte(strconv.Itoa(i))), 0))
		}
		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		var held []backend.Delivery
		for i := range n {
			d := <-s.Deliveries()
			env, _ := d.Envelope()
			if string(env.Payload) != strconv.Itoa(i) {
				t.Fatalf("delivery %d has payload %s", i, env.Payload)
			}
			held = append(held, d)
			if len(held) == 50 {
				// Drop half way through: the 50 held and the one offered go back in order.
				if i == n/2 {
					s.Drop()
					s, err = b.Consume(ctx, q)
					rig.Must(t, err)
					for j := range 50 {
						d := <-s.Deliveries()
						env, _ := d.Envelope()
						if want := strconv.Itoa(i - 49 + j); string(env.Payload) != want || !env.Redelivered {
							t.Fatalf("after drop got %s (redelivered %v), want %s", env.Payload, env.Redelivered, want)
						}
						rig.Must(t, d.Ack(ctx))
					}
					held = nil
					continue
				}
				for _, d := range held {
					rig.Must(t, d.Ack(ctx))
				}
				held = held[:0]
			}
		}
	})
}

// TestRepeatPublishIsDropped: a publish of a job id the queue still holds (ready,
// delayed, deferred, delivered and not settled) is dropped and reports success; once
// the job is settled the id may come again; a settle's own republish is no repeat.
func TestRepeatPublishIsDropped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := backend.QueueConfig{Name: "jobs", Prefetch: 1}
		b := declared(t, q)
		stats := func(want memory.QueueStats) {
			t.Helper()
			synctest.Wait()
			if got, err := b.Stats("jobs"); err != nil || got != want {
				t.Fatalf("Stats = %+v %v, want %+v", got, err, want)
			}
		}
		ready := backend.NewEnvelope("jobs", []byte("ready"))
		delayed := backend.NewEnvelope("jobs", []byte("delayed"))
		deferred := backend.NewEnvelope("jobs", []byte("deferred"))
		rig.Must(t, b.Publish(ctx, ready, 0))
		rig.Must(t, b.Publish(ctx, delayed, time.Minute))
		rig.Must(t, b.Defer(ctx, deferred, time.Minute))
		for _, env := range []backend.Envelope{ready, delayed, deferred} {
			rig.Must(t, b.Publish(ctx, env, 0))
			rig.Must(t, b.Publish(ctx, env, time.Second))
			rig.Must(t, b.Defer(ctx, env, time.Second))
		}
		stats(memory.QueueStats{Pending: 1, Delayed: 1, Deferred: 1})

		s, err := b.Consume(ctx, q)
		rig.Must(t, err)
		d := <-s.Deliveries() // ready, in flight
		rig.Must(t, b.Publish(ctx, ready, 0))
		stats(memory.QueueStats{Unacked: 1, Delayed: 1, Deferred: 1})
		// Retry republishes the job it settles: not a repeat.
		rig.Must(t, d.Retry(ctx, ready, 0))
		d = <-s.Deliveries()
		stats(memory.QueueStats{Unacked: 1, Delayed: 1, Deferred: 1, Acked: 1})
		rig.Must(t, d.Ack(ctx))
		// Settled: the id is free again.
		rig.Must(t, b.Publish(ctx, ready, 0))
		stats(memory.QueueStats{Pending: 1, Delayed: 1, Deferred: 1, Acked: 2})
		d = <-s.Deliveries()
		rig.Must(t, d.DeadLetter(ctx, "dead"))
		rig.Must(t, b.Publish(ctx, ready, 0)) // a dead letter is not held
		stats(memory.QueueStats{Pending: 1, Delayed: 1, Deferred: 1, Acked: 2, Dead: 1})

		// Released after their delays, the others are held until they are settled.
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		rig.Must(t, b.Publish(ctx, delayed, 0))
		rig.Must(t, b.Publish(ctx, deferred, 0))
		pending, err := b.Pending("jobs")
		rig.Must(t, err)
		if len(pending) != 2 {
			t.Fatalf("pending %d jobs, want 2 (one offered to the stream)", len(pending))
		}
	})
}

// TestKeepEndedBoundsTheResultsKept: a job can await one that ended among the
// KeepEnded latest (10,000 by default); an older one, or any with KeepEnded negative,
// is unknown.
func TestKeepEndedBoundsTheResultsKept(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		keep                int
		wantFirst, wantLast bool
	}{
		{"default", 0, true, true},
		{"the latest one", 1, false, true},
		{"none", -1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				b := memory.New(memory.Config{KeepEnded: tc.keep})
				defer rig.Close(t, b)
				q := backend.QueueConfig{Name: "q"}
				rig.Must(t, b.Declare(ctx, q))
				first, last := backend.NewEnvelope("q", []byte("first")), backend.NewEnvelope("q", []byte("last"))
				rig.Must(t, b.Publish(ctx, first, 0))
				rig.Must(t, b.Publish(ctx, last, 0))
				s, err := b.Consume(ctx, q)
				rig.Must(t, err)
				defer s.Drop()
				for range 2 {
					rig.Must(t, (<-s.Deliveries()).Ack(ctx))
				}
				for _, c := range []struct {
					env  backend.Envelope
					want bool
				}{{first, tc.wantFirst}, {last, tc.wantLast}} {
					dep := backend.Dependent{
						Publication: backend.Publication{Envelope: backend.NewEnvelope("q", []byte("dep"))},
						Await:       backend.Await{IDs: []string{c.env.ID}},
					}
					err := b.PublishDependents(ctx, []backend.Dependent{dep})
					if c.want && err != nil || !c.want && !errors.Is(err, backend.ErrUnknownAwait) {
						t.Errorf("awaiting the ended job %q: %v, want it known: %v", c.env.Payload, err, c.want)
					}
				}
			})
		})
	}
}
