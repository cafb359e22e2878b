package rabbitmq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// leaderBackend opens a backend with a prefix of its own (so its leadership queue is
// the test's alone), through Config.URLs only, as the CLI configures it.
func leaderBackend(t *testing.T, prefix string, qt rabbitmq.QueueType) *rabbitmq.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := rabbitmq.Open(ctx, rabbitmq.Config{URLs: []string{brokerURL(t)}, Prefix: prefix, QueueType: qt})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	rabbitmq.SetTokenCycle(b, 200*time.Millisecond)
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// leaderChannel opens a raw channel on the broker and deletes the prefix's leadership
// queue when the test ends.
func leaderChannel(t *testing.T, prefix string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			ch.QueueDelete(prefix+".schedules.leader", false, false, false)
		}
		conn.Close()
	})
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declaredLeaderQueue declares a fresh prefix's leadership queue, as a host would,
// before any host of the test leads, and returns the prefix, the queue's name and the
// raw channel it was declared on (leaderChannel's).
func declaredLeaderQueue(t *testing.T) (prefix, queue string, ch *amqp.Channel) {
	t.Helper()
	prefix = testPrefix()
	queue = prefix + ".schedules.leader"
	ch = leaderChannel(t, prefix)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-single-active-consumer": true}); err != nil {
		t.Fatal(err)
	}
	return prefix, queue, ch
}

func testPrefix() string { return "lt-" + strings.ToLower(backend.NewID()[18:]) }

func publishRawToken(t *testing.T, ch *amqp.Channel, queue, nonce string, ticks map[string]time.Time) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"nonce": nonce, "ticks": ticks})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", queue, true, false, amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
}

// TestLeadMergesEveryTokenCopy leaves two copies of the token (as a leader that died
// between publishing its token and acking the old one does), each with a tick the
// other lacks or has older: the new leader starts from the newest of each.
func TestLeadMergesEveryTokenCopy(t *testing.T) {
	t.Parallel()
	prefix, queue, ch := declaredLeaderQueue(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	publishRawToken(t, ch, queue, "old", map[string]time.Time{"m/a": t0, "m/b": t0})
	publishRawToken(t, ch, queue, "new", map[string]time.Time{"m/a": t0.Add(time.Minute), "m/c": t0})
	publishRawToken(t, ch, queue, "empty", nil)

	b := leaderBackend(t, prefix, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := b.Lead(ctx)
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	got, err := l.ScheduleTicks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"m/a": t0.Add(time.Minute), "m/b": t0, "m/c": t0}
	if len(got) != len(want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	for k, v := range want {
		if !got[k].Equal(v) {
			t.Errorf("tick of %s: %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestLeadRecoversALostToken has a holder take the only token and drop it without
// re-publishing it (a token lost): a host waiting for the token publishes a new one
// within a token cycle, and leads.
func TestLeadRecoversALostToken(t *testing.T) {
	t.Parallel()
	prefix, queue, ch := declaredLeaderQueue(t)
	publishRawToken(t, ch, queue, "only", nil)
	deliveries, err := ch.Consume(queue, "thief", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held amqp.Delivery
	select {
	case held = <-deliveries:
	case <-time.After(10 * time.Second):
		t.Fatal("the raw consumer got no token")
	}

	b := leaderBackend(t, prefix, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		l   *rabbitmq.Lease
		err error
	}
	led := make(chan result, 1)
	go func() {
		l, err := b.Lead(ctx)
		led <- result{l, err}
	}()
	// Let the waiting host's first check (token held: none ready) pass, then lose the
	// token: acked, never re-published; the thief leaves.
	time.Sleep(500 * time.Millisecond)
	if err := held.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Cancel("thief", false); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-led:
		if r.err != nil {
			t.Fatalf("Lead: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no leader 10 s after the token was lost (token cycle 200 ms)")
	}
}

// TestLeadershipQueueFollowsTheQueueType declares the leadership queue as a quorum
// queue on a quorum backend, so that the loss of a node does not stop the schedules.
func TestLeadershipQueueFollowsTheQueueType(t *testing.T) {
	t.Parallel()
	prefix := testPrefix()
	leaderChannel(t, prefix) // deletes the queue at the end
	b := leaderBackend(t, prefix, rabbitmq.Quorum)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.Lead(ctx); err != nil {
		t.Fatalf("Lead: %v", err)
	}
	// Declaring it again as a quorum queue succeeds only if it is one.
	_, ch2 := amqpChannel(t, brokerURL(t))
	_, err := ch2.QueueDeclare(prefix+".schedules.leader", true, false, false, false, amqp.Table{"x-single-active-consumer": true, "x-queue-type": "quorum"})
	if err != nil {
		t.Fatalf("the leadership queue is not a quorum queue: %v", err)
	}
}

// TestTokenForgetsRemovedSchedules runs a scheduler on a lease with two every-second
// schedules, then removes one: the token the leader leaves behind carries the tick of
// the one that stays and no longer the removed one's (it kept it for ever: a token
// that grew with every schedule that ever existed).
func TestTokenForgetsRemovedSchedules(t *testing.T) {
	t.Parallel()
	prefix := testPrefix()
	queue := prefix + ".schedules.leader"
	ch := leaderChannel(t, prefix)
	b := leaderBackend(t, prefix, "")
	q := uniqueQueue(t)
	if err := b.Declare(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	every, err := schedule.ParseCron("@every 1s", "")
	if err != nil {
		t.Fatal(err)
	}
	kept := schedule.Entry{Module: "m", Queue: q.Name, Spec: schedule.Spec{Name: "kept", Cron: every, Overlap: schedule.OverlapAllow}}
	removed := schedule.Entry{Module: "m", Queue: q.Name, Spec: schedule.Spec{Name: "removed", Cron: every, Overlap: schedule.OverlapAllow}}
	s := schedule.New(schedule.Config{Acquire: func(ctx context.Context) (backend.ScheduleStore, <-chan struct{}, error) {
		l, err := b.Lead(ctx)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Lost(), nil
	}})
	s.Set([]schedule.Entry{kept, removed})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); s.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	last := func(key string) time.Time {
		for _, st := range s.List() {
			if st.Name == key {
				return st.Last
			}
		}
		return time.Time{}
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s", what)
			}
		}
	}
	waitUntil("both schedules fired", func() bool { return !last(kept.Key()).IsZero() && !last(removed.Key()).IsZero() })
	s.Set([]schedule.Entry{kept})
	removedAt := time.Now()
	// The kept schedule fires a tick after the removal: the scheduler told the lease the
	// new set before that fire (it prunes before it fires), and the fire returns once the
	// token it re-published is confirmed, so that token lacks the removed tick, and so
	// does every token published after it.
	waitUntil("the kept schedule firing after the removal", func() bool { return last(kept.Key()).After(removedAt) })
	cancel() // the lease ends: the broker puts the held token back
	<-ran

	var tokens []map[string]time.Time
	waitUntil("the token back in its queue", func() bool {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatalf("get the token: %v", err)
			}
			if !ok {
				return len(tokens) > 0
			}
			var tok struct {
				Ticks map[string]time.Time `json:"ticks"`
			}
			if err := json.Unmarshal(d.Body, &tok); err != nil {
				t.Fatalf("token %q: %v", d.Body, err)
			}
			tokens = append(tokens, tok.Ticks)
		}
	})
	for _, ticks := range tokens {
		if _, ok := ticks[kept.Key()]; !ok {
			t.Errorf("the token lacks the kept schedule's tick: %v", ticks)
		}
		if tick, ok := ticks[removed.Key()]; ok {
			t.Errorf("the token still carries the tick %v of %s, removed at %v: %v", tick, removed.Key(), removedAt, ticks)
		}
	}
}
