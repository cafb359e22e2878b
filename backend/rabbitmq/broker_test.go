package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
	"github.com/wasmjobs/wasmjobs/worker"
)

// restartBroker restarts the test broker with the project's script; its durable state
// survives.
func restartBroker(t *testing.T) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "rabbitmq.sh")
	out, err := exec.Command(script, "restart").CombinedOutput()
	if err != nil {
		t.Fatalf("restarting the broker: %v\n%s", err, out)
	}
}

func uniqueQueue(t *testing.T) backend.QueueConfig {
	return backend.QueueConfig{Name: fmt.Sprintf("rt-%s-%s", strings.ReplaceAll(t.Name(), "/", "-"), backend.NewID()[18:]), Prefetch: 50, PriorityLevels: 2}
}

// declared opens a backend, closed with the test, and declares a queue of its own.
func declared(t *testing.T) (*rabbitmq.Backend, backend.QueueConfig) {
	t.Helper()
	b := open(t, rabbitmq.Config{})
	t.Cleanup(func() { b.Close(context.Background()) })
	q := uniqueQueue(t)
	if err := b.Declare(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	return b, q
}

// collect receives from s into a map of payloads, acking, until n distinct arrived.
func collect(t *testing.T, s backend.Stream, n int, timeout time.Duration) map[string]time.Time {
	t.Helper()
	got := make(map[string]time.Time)
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case d, ok := <-s.Deliveries():
			if !ok {
				t.Fatalf("stream ended after %d of %d: %v", len(got), n, s.Err())
			}
			env, err := d.Envelope()
			if err != nil {
				t.Fatalf("Envelope: %v", err)
			}
			if _, dup := got[string(env.Payload)]; !dup {
				got[string(env.Payload)] = time.Now()
			}
			if err := d.Ack(context.Background()); err != nil && !errors.Is(err, backend.ErrStreamClosed) {
				t.Fatalf("Ack: %v", err)
			}
		case <-deadline:
			t.Fatalf("received %d of %d within %v", len(got), n, timeout)
		}
	}
	return got
}

// TestBrokerRestartDuringDelays restarts the broker while messages are held in the
// delay chain: every one still arrives, none early, on a stream that resumed by itself.
// It runs before the parallel tests: a restart would disturb them.
func TestBrokerRestartDuringDelays(t *testing.T) {
	testbroker.RestartableURL(t)
	ctx := context.Background()
	b, q := declared(t)
	s, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Drop()
	due := make(map[string]time.Time)
	for i, delay := range []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second, 9 * time.Second, 15 * time.Second} {
		p := fmt.Sprintf("job-%d", i)
		due[p] = time.Now().Add(delay)
		if err := b.Publish(ctx, backend.NewEnvelope(q.Name, []byte(p)), delay); err != nil {
			t.Fatal(err)
		}
	}
	restartBroker(t)
	got := collect(t, s, len(due), 60*time.Second)
	for p, at := range got {
		if at.Before(due[p]) {
			t.Errorf("%s arrived %v early", p, due[p].Sub(at))
		}
	}
	t.Logf("after a broker restart: %d delayed jobs, all arrived, none early (latest lateness %v)", len(got), lateness(got, due))
}

func lateness(got, due map[string]time.Time) time.Duration {
	var worst time.Duration
	for p, at := range got {
		worst = max(worst, at.Sub(due[p]))
	}
	return worst
}

// TestBrokerRestartDuringConsumption restarts the broker while a stream consumes: the
// stream resumes by itself and nothing is lost.
func TestBrokerRestartDuringConsumption(t *testing.T) {
	testbroker.RestartableURL(t)
	ctx := context.Background()
	b, q := declared(t)
	const n = 2000
	for i := range n {
		if err := b.Publish(ctx, backend.NewEnvelope(q.Name, fmt.Appendf(nil, "job-%d", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	q.Prefetch = 10
	s, err := b.Consume(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Drop()
	first := collect(t, s, 300, 30*time.Second)
	var restarted sync.WaitGroup
	restarted.Go(func() { restartBroker(t) })
	rest := collect(t, s, n-len(first), 90*time.Second)
	restarted.Wait()
	for p := range first {
		delete(rest, p)
	}
	all := len(first) + len(rest)
	if all < n {
		t.Fatalf("%d of %d jobs after the restart", all, n)
	}
	// Publishing works again on the new connection.
	if err := b.Publish(ctx, backend.NewEnvelope(q.Name, []byte("after")), 0); err != nil {
		t.Fatalf("publish after the restart: %v", err)
	}
	collect(t, s, 1, 30*time.Second)
}

// TestMalformedMessagesAreDeadLettered publishes messages a host cannot decode, straight
// with amqp091-go, and runs a worker on the queue: each is dead-lettered with the reason.
func TestMalformedMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, q := declared(t)
	_, ch := amqpChannel(t, brokerURL(t))
	bad := []struct {
		msg    amqp.Publishing
		reason string
	}{
		{amqp.Publishing{Body: []byte("no id")}, "malformed message: no message id"},
		{amqp.Publishing{MessageId: "m1", Body: []byte("no job header")}, "malformed message: no x-wasmjobs header"},
		{amqp.Publishing{MessageId: "m2", Headers: amqp.Table{"x-wasmjobs": "abc"}}, `malformed message: header x-wasmjobs is "abc", want "v1 ATTEMPT MAX_ATTEMPTS DEFERS ENQUEUED_AT_NS"`},
		{amqp.Publishing{MessageId: "m3", Headers: amqp.Table{"x-wasmjobs": int32(1)}}, `malformed message: header x-wasmjobs is "1", want "v1 ATTEMPT MAX_ATTEMPTS DEFERS ENQUEUED_AT_NS"`},
		{amqp.Publishing{MessageId: "m4", Headers: amqp.Table{"x-wasmjobs": "v1 0 0 0 0"}}, "malformed message: attempt 0 in header x-wasmjobs, want 1 or more"},
		{amqp.Publishing{MessageId: "m5", Headers: amqp.Table{"x-wasmjobs": "v1 1 0 0 0", "x-wasmjobs-reason": int32(5)}}, "malformed message: header x-wasmjobs-reason is a int32, want a string"},
		{amqp.Publishing{MessageId: "m6", Headers: amqp.Table{"x-wasmjobs": "v1 1 0 0 0", "x-wasmjobs-headers": "flat"}}, "malformed message: header x-wasmjobs-headers is a string, want a table"},
		{amqp.Publishing{MessageId: "m7", Headers: amqp.Table{"x-wasmjobs": "v1 1 0 0 0", "x-wasmjobs-headers": amqp.Table{"k": int32(1)}}}, `malformed message: job header "k" is a int32, want a string`},
	}
	for _, m := range bad {
		if err := ch.PublishWithContext(ctx, "", q.Name, false, false, m.msg); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	ran := 0
	w := worker.New(b, worker.Config{})
	if err := w.Register(ctx, worker.Queue{Name: q.Name, PriorityLevels: q.PriorityLevels, Handler: worker.HandlerFunc(func(context.Context, *worker.Job) worker.Result {
		mu.Lock()
		ran++
		mu.Unlock()
		return worker.Result{}
	})}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var dead []backend.DeadLetter
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for len(dead) < len(bad) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		dead, err = b.DeadLetters(ctx, q.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	if len(dead) != len(bad) || ran != 0 {
		t.Fatalf("%d dead letters of %d, handler ran %d times", len(dead), len(bad), ran)
	}
	// The worker ran them concurrently: compare by reason.
	byReason := make(map[string]backend.DeadLetter)
	for _, d := range dead {
		byReason[d.Reason] = d
	}
	for _, m := range bad {
		d, ok := byReason[m.reason]
		if !ok || d.Envelope.ID == "" {
			t.Errorf("no dead letter with reason %q (got %+v)", m.reason, dead)
		}
	}
	// The one without an id got one, so it can be replayed.
	if err := b.ReplayDeadLetter(ctx, q.Name, byReason["malformed message: no message id"].Envelope.ID); err != nil {
		t.Fatal(err)
	}
}

func TestConflictingDeclarationIsAClearError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, q := declared(t)
	q.PriorityLevels = 5
	err := b.Declare(ctx, q)
	var te *backend.TransportError
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("queue %q exists on the broker with other arguments than wanted (map[x-max-priority:5])", q.Name)) ||
		!strings.Contains(err.Error(), "PRECONDITION_FAILED") || !errors.As(err, &te) {
		t.Fatalf("conflicting declaration: %v", err)
	}
	// The backend still works after the broker closed that channel.
	q.PriorityLevels = 2
	if err := b.Publish(ctx, backend.NewEnvelope(q.Name, nil), 0); err != nil {
		t.Fatalf("publish after the conflict: %v", err)
	}
}

func TestOpenAndConfigErrors(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	_, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:9/"})
	var te *backend.TransportError
	if err == nil || !errors.As(err, &te) || !strings.Contains(err.Error(), "amqp://guest:xxxxx@127.0.0.1:9/") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("unreachable broker: %v", err)
	}
	b := open(t, rabbitmq.Config{Unit: time.Microsecond, Levels: 3})
	defer b.Close(context.Background())
	if b.MaxDelay() != 7*time.Millisecond {
		t.Fatalf("max delay %v with 3 levels of the clamped 1 ms", b.MaxDelay())
	}
	ctx := context.Background()
	q := uniqueQueue(t)
	b.Declare(ctx, q)
	if err := b.Publish(ctx, backend.NewEnvelope(q.Name, nil), time.Second); err == nil || !strings.Contains(err.Error(), "passes the longest delay this backend holds, 7ms") {
		t.Fatalf("over-long delay: %v", err)
	}
	if _, err := b.QueueStats(ctx, "nope-"+backend.NewID()); !errors.Is(err, backend.ErrUnknownQueue) {
		t.Fatalf("stats of an unknown queue: %v", err)
	}
	st, err := b.QueueStats(ctx, q.Name)
	if err != nil || st.Pending != 0 || st.Unacked != -1 {
		t.Fatalf("stats %+v %v", st, err)
	}
}
