package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// blockUntilDone is a handler that stages a child and output, then waits for its
// context to end, and reports the context's cause on causes.
func blockUntilDone(causes chan<- error) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return worker.Result{Output: []byte("partial"), Children: []worker.Child{{Queue: "child", Payload: []byte("kid")}}}
	})
}

// A running job cancelled by Cancel: its handler's context ends with ErrCancelled as
// the cause, and whatever its result (an ack with a child here) it settles as
// cancelled: off its queue for good, never run again, its child not published. A
// delivery with backend.CancellableDelivery is settled through it; any other (a
// RabbitMQ's) is acknowledged.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		acks          *slowAcks // nil: the memory backend's own deliveries
		wantCancelled int
	}{
		{"cancellable delivery", nil, 1},
		{"plain delivery is acknowledged", &slowAcks{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				causes := make(chan error, 2)
				var l runLog
				var wrap func(backend.Backend) backend.Backend
				if tc.acks != nil {
					wrap = tc.acks.wrap
				}
				r := newRigOn(t, wrap, worker.Config{}, worker.Queue{Name: "q", Handler: l.handler(blockUntilDone(causes).Handle)})
				if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
					t.Fatal(err)
				}
				env := r.publish("q", "long")
				synctest.Wait()
				if err := r.w.Cancel(context.Background(), env.ID); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
				if cause := <-causes; !errors.Is(cause, worker.ErrCancelled) {
					t.Fatalf("the handler's context ended with cause %v, want ErrCancelled", cause)
				}
				// Cancel returned after the settle: the job is gone already.
				st := r.stats("q")
				if st.Cancelled != tc.wantCancelled || st.Acked != 1 || st.Pending+st.Unacked+st.Delayed+st.Dead != 0 {
					t.Fatalf("stats of q after Cancel returned: %+v, want %d cancelled, one acked and nothing left", st, tc.wantCancelled)
				}
				time.Sleep(time.Hour)
				if n := len(l.all()); n != 1 {
					t.Fatalf("the job ran %d times, want once", n)
				}
				if st := r.stats("child"); st.Pending+st.Delayed != 0 {
					t.Fatalf("the cancelled job's child was published: %+v", st)
				}
				ev := r.settled()
				if len(ev) != 1 || ev[0].Settle != worker.Cancelled || ev[0].Reason != worker.ErrCancelled.Error() || ev[0].Settle.String() != "cancelled" {
					t.Fatalf("settled events = %+v, want one, cancelled with the reason %q", ev, worker.ErrCancelled)
				}
				if err := r.w.Cancel(context.Background(), env.ID); !errors.Is(err, worker.ErrNotRunning) {
					t.Fatalf("Cancel of the settled job: %v, want ErrNotRunning", err)
				}
			})
		})
	}
}

// Cancel of a job that is not running here, waiting in its queue or unknown, fails
// with ErrNotRunning and changes nothing.
func TestCancelJobNotRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		r := newRig(t, worker.Config{Concurrency: 1}, worker.Queue{Name: "q", Handler: waitFor(release)})
		r.publish("q", "running")
		waiting := r.publish("q", "waiting")
		synctest.Wait()
		for _, id := range []string{waiting.ID, "no-such-job"} {
			if err := r.w.Cancel(context.Background(), id); !errors.Is(err, worker.ErrNotRunning) {
				t.Errorf("Cancel(%s): %v, want ErrNotRunning", id, err)
			}
		}
		close(release)
		synctest.Wait()
		if st := r.stats("q"); st.Acked != 2 || st.Cancelled != 0 {
			t.Fatalf("stats = %+v, want both jobs acked, none cancelled", st)
		}
	})
}

// A Cancel that comes after the handler returned loses to the settle under way: it
// fails with ErrSettling naming that settle, and the job settles as its handler said.
func TestCancelAfterTheHandlerReturnedTheSettleWins(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &slowAcks{ackTime: 2 * time.Second}
		r := newRigOn(t, b.wrap, worker.Config{}, worker.Queue{Name: "q", Handler: nop})
		env := r.publish("q", "quick")
		time.Sleep(time.Second) // the handler returned; the ack takes 2 s
		err := r.w.Cancel(context.Background(), env.ID)
		if !errors.Is(err, worker.ErrSettling) || !strings.Contains(err.Error(), "ack") {
			t.Fatalf("Cancel during the ack: %v, want ErrSettling naming the ack", err)
		}
		time.Sleep(2 * time.Second)
		if st := r.stats("q"); st.Acked != 1 || st.Cancelled != 0 || b.acked.Load() != 1 {
			t.Fatalf("stats = %+v, want the job acked, not cancelled", st)
		}
		if ev := r.settled(); len(ev) != 1 || ev[0].Settle != worker.Ack {
			t.Fatalf("settled events = %+v, want one ack", ev)
		}
	})
}

// Cancel waits for the settle only as long as its context: a handler that ignores its
// context keeps Cancel waiting until ctx ends, and still settles as cancelled when it
// returns; a second Cancel meanwhile waits for the same settle.
func TestCancelWaitIsBoundByItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			time.Sleep(time.Minute) // deaf to its context
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		env := r.publish("q", "deaf")
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := r.w.Cancel(ctx, env.ID); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Cancel of a deaf handler: %v, want the deadline", err)
		}
		if took := time.Since(start); took != 10*time.Second {
			t.Fatalf("Cancel returned after %v, want its 10s", took)
		}
		second := make(chan error, 1)
		go func() { second <- r.w.Cancel(context.Background(), env.ID) }()
		notYet(t, second, "a second Cancel returned %v before the handler did")
		if err := <-second; err != nil {
			t.Fatalf("second Cancel: %v", err)
		}
		if st := r.stats("q"); st.Cancelled != 1 || st.Pending+st.Unacked != 0 {
			t.Fatalf("stats = %+v, want the job cancelled once its handler returned", st)
		}
	})
}
