package host_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/pebble"
	"github.com/wasmjobs/wasmjobs/internal/outbound/outboundtest"
	"github.com/wasmjobs/wasmjobs/worker"
)

// The job semantics of outbound HTTP end to end, on the default backend: the durable
// Pebble store, the real worker and the host, with abi/http_post_retry (a POST to the
// payload's URL; an ack on 2xx, a retry otherwise). They run in real time: wazero's
// calls and the loopback network do not run inside a synctest bubble.

// semanticsRig is a worker serving a module (abi/http_post_retry unless told) under
// manifest from a Pebble store, counting its settles.
type semanticsRig struct {
	t     *testing.T
	b     *pebble.Backend
	queue string

	mu      sync.Mutex
	settles map[string][]worker.Event // by job id
	acked   int
	anyAck  chan struct{} // signalled at each ack
}

func newSemanticsRig(t *testing.T, manifest string, concurrency int) *semanticsRig {
	t.Helper()
	return newSemanticsRigOf(t, "abi/http_post_retry", manifest, concurrency)
}

// newSemanticsRigOf is newSemanticsRig serving the testdata module rel.
func newSemanticsRigOf(t *testing.T, rel, manifest string, concurrency int) *semanticsRig {
	t.Helper()
	m := loadFile(t, httpEngine(t, nil), rel, manifest)
	b := openPebble(t)
	r := &semanticsRig{t: t, b: b, queue: m.Queue(), settles: map[string][]worker.Event{}, anyAck: make(chan struct{}, 1)}
	serve(t, b, m, worker.Config{Concurrency: concurrency, Observer: worker.ObserverFunc(func(ev worker.Event) {
		if ev.Kind != worker.EventSettled {
			return
		}
		r.mu.Lock()
		r.settles[ev.Job.Envelope.ID] = append(r.settles[ev.Job.Envelope.ID], ev)
		if ev.Settle == worker.Ack {
			r.acked++
		}
		r.mu.Unlock()
		if ev.Settle == worker.Ack {
			select {
			case r.anyAck <- struct{}{}:
			default:
			}
		}
	})})
	return r
}

func (r *semanticsRig) publish(url string) string {
	r.t.Helper()
	env := backend.NewEnvelope(r.queue, []byte(url))
	if err := r.b.Publish(context.Background(), env, 0); err != nil {
		r.t.Fatal(err)
	}
	return env.ID
}

// waitAcks waits up to d for n acks in all.
func (r *semanticsRig) waitAcks(n int, d time.Duration) {
	r.t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		acked := r.acked
		r.mu.Unlock()
		if acked >= n {
			return
		}
		select {
		case <-r.anyAck:
		case <-deadline:
			r.t.Fatalf("%d jobs acked within %v, want %d", acked, d, n)
		}
	}
}

func (r *semanticsRig) dead() []backend.DeadLetter {
	r.t.Helper()
	dl, err := r.b.DeadLetters(context.Background(), r.queue, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return dl
}

// A job whose every run sends POST, GET, POST (abi/http_post_get_post) and that
// retries twice sends the same idempotency keys, -1 and -2, on each attempt, the GET
// taking none; a dead letter replayed by an operator is new work, its keys of
// generation 1.
func TestE2EIdempotencyKeysAcrossAttemptsAndReplay(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	keys := map[string][]string{} // the POSTs' keys, by path
	gets := map[string]int{}      // the GETs, by path
	var deadUp atomic.Bool
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodGet {
			keys[r.URL.Path] = append(keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
			return
		}
		gets[r.URL.Path]++
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			t.Errorf("a GET carried the key %q", k)
		}
		// The run fails at its GET: the first two runs of /retry, every run of /dead
		// until it is back.
		if r.URL.Path == "/retry" && gets[r.URL.Path] <= 2 || r.URL.Path == "/dead" && !deadUp.Load() {
			w.WriteHeader(500)
		}
	})
	// Breakers out of the way: this test is about keys.
	r := newSemanticsRigOf(t, "abi/http_post_get_post", fmt.Sprintf(`max_attempts = 3
backoff_base = "10ms"
backoff_cap = "50ms"
[http]
allow = ["http://127.0.0.1:%s"]
idempotency_header = "Idempotency-Key"
breaker_failures = 1000
`, srv.Port), 2)
	retried := r.publish(srv.URL + "/retry")
	dead := r.publish(srv.URL + "/dead")
	r.waitAcks(1, 30*time.Second)
	for i := 0; len(r.dead()) == 0; i++ {
		if i == 300 {
			t.Fatal("the failing job was not dead-lettered within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadUp.Store(true)
	if err := r.b.ReplayDeadLetter(context.Background(), r.queue, dead); err != nil {
		t.Fatal(err)
	}
	r.waitAcks(2, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	run := func(id string) []string { return []string{id + "-1", id + "-2"} }
	if want := slices.Concat(run(retried), run(retried), run(retried)); !slices.Equal(keys["/retry"], want) {
		t.Errorf("keys of the job retried twice: %q, want %q", keys["/retry"], want)
	}
	if want := slices.Concat(run(dead), run(dead), run(dead), run(dead+"-r1")); !slices.Equal(keys["/dead"], want) {
		t.Errorf("keys of the dead-lettered then replayed job: %q, want %q", keys["/dead"], want)
	}
}

// A destination down for 30 s (503 to every request) dead-letters no job: once its
// breaker opens, the jobs that meet it wait the outage out without spending attempts,
// and every job succeeds once it is back.
func TestE2EOutageDeadLettersNoJob(t *testing.T) {
	t.Parallel()
	const jobs, down = 50, 30 * time.Second
	var up atomic.Bool
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(503)
		}
	})
	r := newSemanticsRig(t, fmt.Sprintf(`max_attempts = 3
backoff_base = "100ms"
backoff_cap = "1s"
[http]
allow = ["http://127.0.0.1:%s"]
breaker_cooldown = "2s"
`, srv.Port), 8)
	start := time.Now()
	for range jobs {
		r.publish(srv.URL + "/")
	}
	time.Sleep(down)
	downHits := srv.Hits.Load()
	up.Store(true)
	r.waitAcks(jobs, time.Minute)
	if dl := r.dead(); len(dl) != 0 {
		t.Fatalf("%d dead letters, first %q: an outage dead-letters no job", len(dl), dl[0].Reason)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	outageDefers, retries := 0, 0
	for id, evs := range r.settles {
		if last := evs[len(evs)-1]; last.Settle != worker.Ack {
			t.Errorf("job %s ended %s", id, last.Settle)
		}
		for _, ev := range evs {
			switch {
			case ev.Settle == worker.Defer && ev.Result.Outage:
				outageDefers++
				if !strings.HasPrefix(ev.Result.Reason, "waiting out an outage") {
					t.Errorf("outage defer's reason %q", ev.Result.Reason)
				}
			case ev.Settle == worker.Retry:
				retries++
			}
		}
	}
	// The breaker opens at its fifth failure: the four before it spend their jobs'
	// attempts, and no later failure does.
	if retries > 4 || outageDefers < jobs {
		t.Errorf("%d retries and %d outage defers, want at most 4 retries and every job deferred", retries, outageDefers)
	}
	// While it is down the destination sees the failures that open the breaker and a
	// probe per cooldown, not every job's every run.
	if most := int64(5 + 2*down/(2*time.Second)); downHits > most {
		t.Errorf("the destination had %d requests while down, want at most %d", downHits, most)
	}
	t.Logf("%d jobs acked %v after the start (down %v): %d retries, %d outage defers, %d requests while down",
		jobs, time.Since(start).Round(time.Millisecond), down, retries, outageDefers, downHits)
}

// A rate = "5/s" limit of [http.limits] holds within 10% over 20 s of arrivals at the
// server, for jobs that run eight at a time.
func TestE2ERateLimitHolds(t *testing.T) {
	t.Parallel()
	const rate, window, jobs = 5, 20 * time.Second, 112
	var mu sync.Mutex
	var arrivals []time.Time
	srv := outboundtest.NewServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	})
	r := newSemanticsRig(t, fmt.Sprintf(`concurrency = 8
[http]
allow = ["http://127.0.0.1:%s"]
[http.limits."http://127.0.0.1:%s"]
rate = "%d/s"
`, srv.Port, srv.Port, rate), 8)
	for range jobs {
		r.publish(srv.URL + "/")
	}
	r.waitAcks(jobs, time.Minute)
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	n := 0
	for _, a := range arrivals {
		if a.Sub(arrivals[0]) < window {
			n++
		}
	}
	want := rate * int(window/time.Second)
	if lo, hi := want*9/10, want*11/10; n < lo || n > hi {
		t.Fatalf("%d requests arrived in %v, want %d within 10%% (%d to %d)", n, window, want, lo, hi)
	}
	if dl := r.dead(); len(dl) != 0 {
		t.Fatalf("%d dead letters, first %q", len(dl), dl[0].Reason)
	}
	t.Logf("%d requests arrived in the first %v (want %d); all %d in %v", n, window, want, len(arrivals), arrivals[len(arrivals)-1].Sub(arrivals[0]).Round(time.Millisecond))
}
