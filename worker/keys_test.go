package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/worker"
)

// keyWatch records, per concurrency key, how many of its jobs run and the order they
// started in, and the peak of jobs running over every key.
type keyWatch struct {
	mu       sync.Mutex
	running  map[string]int
	started  map[string][]int
	overlaps []string
	now      int
	peak     int
	done     int
	all      chan struct{}
	total    int
}

func (k *keyWatch) start(key string, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running[key]++; k.running[key] > 1 {
		k.overlaps = append(k.overlaps, fmt.Sprintf("job %d of %s started while %d others of its key ran", n, key, k.running[key]-1))
	}
	k.started[key] = append(k.started[key], n)
	k.now++
	k.peak = max(k.peak, k.now)
}

func (k *keyWatch) end(key string, finished bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running[key]--
	k.now--
	if finished {
		if k.done++; k.done == k.total {
			close(k.all)
		}
	}
}

// The case for key_concurrency = 1 on pebble: 1,000 jobs over 10 keys on a
// worker of concurrency 64, every seventh failing its first attempt, never run two jobs
// of one key at once, and start each key's jobs in enqueue order (a retried job starts
// again before its key's next one).
func TestKeyConcurrencyOnPebble(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: t.TempDir(), BallastSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	const keys, total = 10, 1000
	watch := &keyWatch{running: map[string]int{}, started: map[string][]int{}, all: make(chan struct{}), total: total}
	h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		n, err := strconv.Atoi(string(j.Envelope.Payload))
		if err != nil {
			return worker.Result{Outcome: worker.DeadLetter, Reason: err.Error()}
		}
		key := j.Envelope.Key
		watch.start(key, n)
		time.Sleep(200 * time.Microsecond) // long enough for a second job of the key to overlap, were it let
		retry := n%7 == 0 && j.Attempt == 1
		watch.end(key, !retry)
		if retry {
			return worker.Result{Outcome: worker.Retry, Reason: "first attempt of every seventh", Delay: 5 * time.Millisecond}
		}
		return worker.Result{}
	})
	w := worker.New(b, worker.Config{Concurrency: 64, Jitter: noJitter})
	if err := w.Register(ctx, worker.Queue{Name: "keyed", Handler: h, KeyConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	pubs := make([]backend.Publication, total)
	for i := range pubs {
		env := backend.NewEnvelope("keyed", []byte(strconv.Itoa(i)))
		env.Key = fmt.Sprint("key-", i%keys)
		pubs[i] = backend.Publication{Envelope: env}
	}
	if err := b.PublishBatch(ctx, pubs); err != nil { // one write, in enqueue order
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch.all:
	case <-time.After(3 * time.Minute):
		watch.mu.Lock()
		t.Fatalf("%d of %d jobs finished within 3 minutes", watch.done, total)
	}
	stop, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(stop); err != nil {
		t.Fatal(err)
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(watch.overlaps) > 0 {
		t.Fatalf("%d overlaps, the first: %s", len(watch.overlaps), watch.overlaps[0])
	}
	if watch.peak < 2 {
		t.Errorf("at most %d job ran at once: jobs of different keys should run together", watch.peak)
	}
	for k := range keys {
		key := fmt.Sprint("key-", k)
		var want []int
		for n := k; n < total; n += keys {
			want = append(want, n)
			if n%7 == 0 {
				want = append(want, n) // its retry, before the key's next job
			}
		}
		if got := watch.started[key]; !slices.Equal(got, want) {
			t.Fatalf("%s started its jobs in the order\n%v\nwant\n%v", key, got, want)
		}
	}
}
