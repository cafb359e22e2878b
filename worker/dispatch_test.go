package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/worker"
)

// readyGate is a handler that takes jobs only while open.
type readyGate struct {
	open atomic.Bool
	ran  atomic.Int32
}

func (g *readyGate) Ready() bool { return g.open.Load() }
func (g *readyGate) Handle(ctx context.Context, j *worker.Job) worker.Result {
	g.ran.Add(1)
	return worker.Result{}
}

func TestCapacityBoundsRunningAndClaims(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var running, peak atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(10 * time.Second)
			running.Add(-1)
			return worker.Result{}
		})
		// A prefetch above the concurrency: the worker's own gate must hold.
		r := newRig(t, worker.Config{Concurrency: 2}, worker.Queue{Name: "q", Handler: h, Prefetch: 10})
		for range 10 {
			r.publish("q", "slow")
		}
		time.Sleep(time.Second)
		if st := r.stats("q"); st.Pending != 8 || st.Unacked != 2 || running.Load() != 2 {
			t.Fatalf("with 2 running: stats %+v, running %d; want 8 still pending in the backend", st, running.Load())
		}
		if got := r.w.Running()["q"]; got != 2 {
			t.Fatalf("Running = %d", got)
		}
		time.Sleep(time.Minute)
		if st := r.stats("q"); st.Acked != 10 || peak.Load() != 2 {
			t.Fatalf("stats %+v, peak %d", st, peak.Load())
		}
	})
}

func TestPerQueueLimitAndFairness(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var runningA, peakA atomic.Int32
		var doneB atomic.Int32
		slowA := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if n := runningA.Add(1); n > peakA.Load() {
				peakA.Store(n)
			}
			time.Sleep(time.Second)
			runningA.Add(-1)
			return worker.Result{}
		})
		fastB := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(100 * time.Millisecond)
			doneB.Add(1)
			return worker.Result{}
		})
		r := newRig(t, worker.Config{Concurrency: 4},
			worker.Queue{Name: "a", Handler: slowA, Concurrency: 1, Prefetch: 5},
			worker.Queue{Name: "b", Handler: fastB})
		for range 5 {
			r.publish("a", "x")
		}
		for range 30 {
			r.publish("b", "x")
		}
		time.Sleep(time.Second + time.Millisecond)
		// A holds one slot; B has the other three.
		if doneB.Load() < 27 {
			t.Fatalf("b finished %d jobs in the first second, want the three free slots busy", doneB.Load())
		}
		time.Sleep(time.Minute)
		if peakA.Load() != 1 || r.stats("a").Acked != 5 || r.stats("b").Acked != 30 {
			t.Fatalf("peak a %d, a %+v, b %+v", peakA.Load(), r.stats("a"), r.stats("b"))
		}
	})
}

func TestNotReadyHandlerClaimsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := &readyGate{}
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: g})
		for range 3 {
			r.publish("q", "x")
		}
		time.Sleep(time.Second)
		// The memory stream offers at most one message to a consumer that is not
		// reading: it waits there, unclaimed, and nothing runs.
		if st := r.stats("q"); st.Pending < 2 || st.Pending+st.Unacked != 3 || g.ran.Load() != 0 {
			t.Fatalf("not ready: stats %+v, ran %d", st, g.ran.Load())
		}
		g.open.Store(true)
		time.Sleep(time.Second)
		if g.ran.Load() != 3 {
			t.Fatalf("ran %d after ready, want 3", g.ran.Load())
		}
	})
}

// TestRateLimitPacesTakes runs a queue limited to 50 jobs a second over a backlog of 10
// seconds and more, in virtual time: every second of the ten starts 50±5 jobs, and at
// no moment does the worker hold a claimed delivery that is not running (it waits for
// the limiter before it takes from the stream, not after).
func TestRateLimitPacesTakes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		burst int
	}{
		{"burst 1", 0},
		{"burst 5", 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var (
					mu      sync.Mutex
					starts  []time.Time
					running atomic.Int32
				)
				h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
					running.Add(1)
					defer running.Add(-1)
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					time.Sleep(3 * time.Millisecond)
					return worker.Result{Outcome: worker.Ack}
				})
				r := newRig(t, worker.Config{Concurrency: 16},
					worker.Queue{Name: "q", Handler: h, Rate: 50, Burst: tc.burst})
				t0 := time.Now()
				for range 700 { // 14 s of work at 50/s: a backlog through the 10 s
					r.publish("q", "")
				}
				for step := 0; step < 1000; step++ {
					time.Sleep(10 * time.Millisecond)
					synctest.Wait()
					st := r.stats("q")
					if run := int(running.Load()); st.Unacked > run {
						t.Fatalf("at %v: %d deliveries claimed, %d running: a claimed job waits for the rate limit",
							time.Since(t0), st.Unacked, run)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				per := make([]int, 10)
				for _, at := range starts {
					if s := int(at.Sub(t0) / time.Second); s < 10 {
						per[s]++
					}
				}
				for s, n := range per {
					if n < 45 || n > 55 {
						t.Errorf("second %d started %d jobs, want 50±5 (all seconds: %v)", s, n, per)
					}
				}
				if total := per[0] + per[1] + per[2] + per[3] + per[4] + per[5] + per[6] + per[7] + per[8] + per[9]; total > 500+max(tc.burst, 1) {
					t.Errorf("%d jobs in 10 s, more than 10 s at 50/s plus the burst", total)
				}
			})
		})
	}
}

// TestRateLimitFollowsRegistration checks that registering a queue again with another
// rate takes effect, and that a queue without a rate is not held back.
func TestRateLimitFollowsRegistration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		h := counting(&n)
		r := newRig(t, worker.Config{Concurrency: 4}, worker.Queue{Name: "q", Handler: h, Rate: 10})
		for range 100 {
			r.publish("q", "")
		}
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if got := n.Load(); got != 10 {
			t.Fatalf("%d jobs in the first second at 10/s, want 10", got)
		}
		// Unlimited: the rest of the backlog runs at once.
		if err := r.w.Register(context.Background(), worker.Queue{Name: "q", Handler: h, Rate: rate.Inf}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := n.Load(); got != 100 {
			t.Fatalf("%d jobs run after the rate was lifted, want all 100", got)
		}
	})
}

// TestRateWaitNeverOverflows checks that the wait for a token of a tiny rate is long,
// not an overflowed Duration (which came out as 1ns: a spinning dispatcher).
func TestRateWaitNeverOverflows(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		r    rate.Limit
		want time.Duration
	}{
		{10, 100 * time.Millisecond},
		{1e-9 / 60, time.Hour}, // "1e-9/m": capped
		{1e-30, time.Hour},
	} {
		if got := worker.UntilToken(tc.r, 1, now); got != tc.want {
			t.Errorf("rate %g: wait %v, want %v", float64(tc.r), got, tc.want)
		}
	}
}
