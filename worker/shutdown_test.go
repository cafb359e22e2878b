package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestStopWaitsForSlowJobAndItsAck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &slowAcks{ackTime: 2 * time.Second}
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(5 * time.Second)
			return worker.Result{}
		})
		r := newRigOn(t, b.wrap, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "")
		time.Sleep(time.Second)
		start := time.Now()
		if err := r.stop(time.Minute); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// The job had 4 s to run and its ack 2 s: Stop returns only after both.
		if took := time.Since(start); took != 6*time.Second || b.acked.Load() != 1 {
			t.Fatalf("Stop returned after %v with %d acks, want 6s and 1", took, b.acked.Load())
		}
		if st := r.stats("q"); st.Acked != 1 || st.Pending+st.Unacked != 0 {
			t.Fatalf("stats after Stop: %+v", st)
		}
	})
}

func TestDrainTimeoutLeavesUnfinishedUnacked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var finished atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if string(j.Envelope.Payload) == "quick" {
				time.Sleep(time.Second)
				finished.Add(1)
				return worker.Result{}
			}
			select {
			case <-time.After(time.Hour):
				return worker.Result{}
			case <-ctx.Done():
				return worker.Result{Outcome: worker.Failed, Reason: "cancelled"}
			}
		})
		r := newRig(t, worker.Config{Concurrency: 4}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "quick")
		for range 5 {
			r.publish("q", "slow")
		}
		time.Sleep(100 * time.Millisecond)
		err := r.stop(3 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "drain timeout: 3 jobs left unacknowledged") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v", err)
		}
		synctest.Wait() // the cancelled handlers return; their jobs are not settled
		st := r.stats("q")
		// The quick job finished and was acked; the three running slow ones and the two
		// never started are all back in the queue.
		if finished.Load() != 1 || st.Acked != 1 || st.Pending != 5 || st.Unacked != 0 || st.Dead != 0 || st.Delayed != 0 {
			t.Fatalf("after the drain timeout: stats %+v, finished %d", st, finished.Load())
		}
		if got := r.eventsOf(worker.EventAbandoned); got != 3 {
			t.Fatalf("%d abandoned events, want 3", got)
		}
		pending, _ := r.b.Pending("q")
		for _, env := range pending {
			if string(env.Payload) == "slow" && env.Attempt != 1 {
				t.Fatalf("an abandoned job lost an attempt: %+v", env)
			}
		}
	})
}

// TestStopEndsSettlesAtTheDrainDeadline: the drain timeout is a promise. A settle
// under way when it passes ends with it, not at its own, longer, SettleTimeout.
func TestStopEndsSettlesAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRigOn(t, hangingSettles, worker.Config{SettleTimeout: time.Hour}, worker.Queue{Name: "q", Handler: retryAll})
		r.publish("q", "")
		synctest.Wait() // the job runs and its settle waits
		start := time.Now()
		err := r.stop(5 * time.Second)
		if took := time.Since(start); took != 5*time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop: %v, want the drain timeout", err)
		}
		if st := r.stats("q"); st.Acked != 0 || st.Pending+st.Unacked != 1 {
			t.Fatalf("stats %+v: the job must stay for the backend to deliver again", st)
		}
	})
}

// TestStopEndsStreamsBeforeDroppingThem: Stop cancels a stream's context before it
// drops the stream, so that a stream stuck on a lost connection cannot hold Stop.
func TestStopEndsStreamsBeforeDroppingThem(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRigOn(t, dropWaits, worker.Config{}, worker.Queue{Name: "q", Handler: nop})
		stopped := make(chan error, 1)
		go func() { stopped <- r.w.Stop(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Stop waits on a stream it dropped before ending its context")
			// (the bubble then reports the stuck goroutines)
		}
	})
}

// TestStopIsBoundedWhenASettleIgnoresItsContext: even a backend whose settle ignores
// its context cannot hold Stop past the drain deadline plus its grace; Stop says so.
func TestStopIsBoundedWhenASettleIgnoresItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release) // before the bubble ends, the stuck settle returns
		wrap := func(b backend.Backend) backend.Backend { return deafSettles(b, release) }
		r := newRigOn(t, wrap, worker.Config{SettleTimeout: time.Hour}, worker.Queue{Name: "q", Handler: retryAll})
		r.publish("q", "")
		synctest.Wait() // the job runs and its settle hangs
		start := time.Now()
		err := r.stop(5 * time.Second)
		if took := time.Since(start); took > 5*time.Second+time.Second {
			t.Fatalf("Stop returned after %v, want the 5s drain timeout plus its 1s grace at most", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 settles still under way") {
			t.Fatalf("stop: %v, want the drain timeout and the stuck settle named", err)
		}
	})
}
