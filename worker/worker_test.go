package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestOutcomeSettles(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, r *rig, runs []run)
	cases := []struct {
		name   string
		result func(j *worker.Job) worker.Result // for the first run; later runs ack
		check  check
	}{
		{"ack", func(*worker.Job) worker.Result { return worker.Result{Outcome: worker.Ack} },
			func(t *testing.T, r *rig, runs []run) {
				if len(runs) != 1 || r.stats("q").Acked != 1 {
					t.Fatalf("runs %d, stats %+v", len(runs), r.stats("q"))
				}
			}},
		{"retry with staged delay", func(*worker.Job) worker.Result {
			return worker.Result{Outcome: worker.Retry, Delay: 7 * time.Second, Reason: "busy"}
		}, func(t *testing.T, r *rig, runs []run) {
			if len(runs) != 2 || runs[1].attempt != 2 || runs[1].env.Reason != "busy" {
				t.Fatalf("runs = %+v", runs)
			}
			if gap := runs[1].at.Sub(runs[0].at); gap != 7*time.Second {
				t.Fatalf("retried after %v, want the staged 7s", gap)
			}
		}},
		{"retry without delay uses backoff", func(*worker.Job) worker.Result { return worker.Result{Outcome: worker.Retry} },
			func(t *testing.T, r *rig, runs []run) {
				if len(runs) != 2 || runs[1].env.Reason != "retry requested" || runs[1].at.Sub(runs[0].at) != time.Second {
					t.Fatalf("runs = %+v", runs)
				}
			}},
		{"defer", func(*worker.Job) worker.Result {
			return worker.Result{Outcome: worker.Defer, Delay: 3 * time.Second, Reason: "rate limited"}
		}, func(t *testing.T, r *rig, runs []run) {
			if len(runs) != 2 || runs[1].attempt != 1 || runs[1].env.Defers != 1 || runs[1].env.Reason != "rate limited" {
				t.Fatalf("runs = %+v", runs)
			}
			if runs[1].env.Priority != worker.DefaultPriorityLevels || runs[1].env.Headers[worker.PriorityHeader] != "0" {
				t.Fatalf("deferred job has priority %d, headers %v", runs[1].env.Priority, runs[1].env.Headers)
			}
			if gap := runs[1].at.Sub(runs[0].at); gap != 3*time.Second {
				t.Fatalf("deferred for %v, want 3s", gap)
			}
		}},
		{"defer without delay is a failure", func(*worker.Job) worker.Result { return worker.Result{Outcome: worker.Defer} },
			func(t *testing.T, r *rig, runs []run) {
				if len(runs) != 2 || runs[1].attempt != 2 || runs[1].env.Reason != "defer without delay" {
					t.Fatalf("runs = %+v", runs)
				}
			}},
		{"dead letter", func(*worker.Job) worker.Result { return worker.Result{Outcome: worker.DeadLetter, Reason: "bad input"} },
			func(t *testing.T, r *rig, runs []run) {
				if dl := r.dead("q"); len(runs) != 1 || len(dl) != 1 || dl[0].Reason != "bad input" {
					t.Fatalf("runs %d, dead %+v", len(runs), dl)
				}
			}},
		{"dead letter without reason", func(*worker.Job) worker.Result { return worker.Result{Outcome: worker.DeadLetter} },
			func(t *testing.T, r *rig, runs []run) {
				if dl := r.dead("q"); len(dl) != 1 || dl[0].Reason != "dead-lettered by the handler" {
					t.Fatalf("dead %+v", dl)
				}
			}},
		{"failed ignores staged delay", func(*worker.Job) worker.Result {
			return worker.Result{Outcome: worker.Failed, Reason: "trap: unreachable", Delay: time.Hour}
		}, func(t *testing.T, r *rig, runs []run) {
			if len(runs) != 2 || runs[1].env.Reason != "trap: unreachable" || runs[1].at.Sub(runs[0].at) != time.Second {
				t.Fatalf("runs = %+v", runs)
			}
		}},
		{"invalid outcome is a failure", func(*worker.Job) worker.Result { return worker.Result{Outcome: 7} },
			func(t *testing.T, r *rig, runs []run) {
				if len(runs) != 2 || runs[1].env.Reason != "invalid outcome 7" {
					t.Fatalf("runs = %+v", runs)
				}
			}},
		{"panic is a failure", func(*worker.Job) worker.Result { panic("boom") },
			func(t *testing.T, r *rig, runs []run) {
				if len(runs) != 2 || runs[1].env.Reason != "panic: boom" {
					t.Fatalf("runs = %+v", runs)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var log runLog
				h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
					log.add(j)
					if len(log.all()) == 1 {
						return tc.result(j)
					}
					return worker.Result{}
				})
				r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
				r.publish("q", "job")
				time.Sleep(time.Minute)
				tc.check(t, r, log.all())
				if st := r.stats("q"); st.Pending+st.Unacked+st.Delayed+st.Deferred != 0 {
					t.Fatalf("jobs left over: %+v", st)
				}
			})
		})
	}
}

func TestRetryBackoffSequenceAndMaxAttempts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		queueMax    int
		envelopeMax int
		wantGaps    []time.Duration
	}{
		{"queue max 5", 5, 0, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}},
		{"max 1 dead-letters at once", 1, 0, nil},
		{"envelope overrides queue", 10, 3, []time.Duration{1 * time.Second, 2 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var log runLog
				h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
					log.add(j)
					return worker.Result{Outcome: worker.Failed, Reason: "boom"}
				})
				r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, MaxAttempts: tc.queueMax,
					Backoff: worker.Backoff{Base: time.Second, Cap: 5 * time.Second}})
				r.publish("q", "x", func(e *backend.Envelope) { e.MaxAttempts = tc.envelopeMax })
				time.Sleep(time.Hour)
				runs := log.all()
				if len(runs) != len(tc.wantGaps)+1 {
					t.Fatalf("%d runs, want %d", len(runs), len(tc.wantGaps)+1)
				}
				for i, gap := range tc.wantGaps {
					if got := runs[i+1].at.Sub(runs[i].at); got != gap || runs[i+1].attempt != i+2 {
						t.Errorf("attempt %d after %v, want %v", runs[i+1].attempt, got, gap)
					}
				}
				max := len(runs)
				dl := r.dead("q")
				if want := "max attempts (" + strconv.Itoa(max) + ") exceeded: boom"; len(dl) != 1 || dl[0].Reason != want {
					t.Fatalf("dead letters = %+v, want one with %q", dl, want)
				}
			})
		})
	}
}

func TestDeferReturnsAheadOfBacklog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			if string(j.Envelope.Payload) == "X" && j.Envelope.Defers == 0 {
				return worker.Result{Outcome: worker.Defer, Delay: time.Second}
			}
			time.Sleep(1500 * time.Millisecond) // X comes back while A runs
			return worker.Result{}
		})
		r := newRig(t, worker.Config{Concurrency: 1}, worker.Queue{Name: "q", Handler: h})
		for _, p := range []string{"X", "A", "B", "C", "D"} {
			r.publish("q", p)
		}
		time.Sleep(time.Minute)
		var order []string
		for _, run := range log.all() {
			order = append(order, string(run.env.Payload))
		}
		if got, want := strings.Join(order, ""), "XAXBCD"; got != want {
			t.Fatalf("run order %s, want %s: a deferred job returns ahead of the backlog", got, want)
		}
	})
}

func TestDeferCapAndLastAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			return worker.Result{Outcome: worker.Defer, Delay: time.Second, Reason: "wait"}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, MaxDefers: 3, MaxAttempts: 1})
		r.publish("q", "x")
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 4 {
			t.Fatalf("%d runs, want 4 (3 defers, then dead)", len(runs))
		}
		for i, run := range runs {
			if run.attempt != 1 || run.env.Defers != i {
				t.Errorf("run %d: attempt %d, defers %d", i, run.attempt, run.env.Defers)
			}
		}
		if dl := r.dead("q"); len(dl) != 1 || dl[0].Reason != "max defers (3) exceeded: wait" {
			t.Fatalf("dead letters = %+v", dl)
		}
	})
}

func TestRetryAfterDeferRestoresPriority(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			switch len(log.all()) {
			case 1:
				return worker.Result{Outcome: worker.Defer, Delay: time.Second}
			case 2:
				return worker.Result{Outcome: worker.Failed, Reason: "x"}
			}
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, PriorityLevels: 3})
		r.publish("q", "x", func(e *backend.Envelope) { e.Priority = 1 })
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 3 {
			t.Fatalf("%d runs", len(runs))
		}
		if p := runs[1].env.Priority; p != 3 {
			t.Errorf("deferred run priority %d, want the reserved top level 3", p)
		}
		if p, hdr := runs[2].env.Priority, runs[2].env.Headers; p != 1 || len(hdr) != 0 {
			t.Errorf("retried run priority %d headers %v, want 1 and none", p, hdr)
		}
		if runs[2].env.Defers != 0 {
			t.Errorf("a retry resets the consecutive defers, got %d", runs[2].env.Defers)
		}
	})
}

func TestChildJobsOnlyOnAck(t *testing.T) {
	t.Parallel()
	children := []worker.Child{
		{Queue: "child", Payload: []byte("now"), Headers: map[string]string{"k": "v"}},
		{Queue: "child", Payload: []byte("later"), Delay: 10 * time.Second},
	}
	cases := []struct {
		name         string
		outcome      worker.Outcome
		wantChildren int
	}{
		{"ack publishes", worker.Ack, 2},
		{"retry does not", worker.Retry, 0},
		{"dead letter does not", worker.DeadLetter, 0},
		{"failed does not", worker.Failed, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int32
				h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
					if n.Add(1) > 1 {
						return worker.Result{Outcome: worker.DeadLetter, Reason: "stop"}
					}
					return worker.Result{Outcome: tc.outcome, Children: children, Delay: time.Second}
				})
				r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
				if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
					t.Fatal(err)
				}
				r.publish("q", "parent")
				time.Sleep(5 * time.Second)
				st := r.stats("child")
				if got := st.Pending + st.Delayed; got != tc.wantChildren {
					t.Fatalf("%d children published, want %d", got, tc.wantChildren)
				}
				if tc.wantChildren > 0 {
					pending, _ := r.b.Pending("child")
					if string(pending[0].Payload) != "now" || pending[0].Headers["k"] != "v" || st.Delayed != 1 {
						t.Fatalf("children = %+v, stats %+v", pending, st)
					}
				}
			})
		})
	}
}

func TestFailedChildPublishRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			if j.Attempt == 1 {
				return worker.Result{Children: []worker.Child{{Queue: "nowhere"}}}
			}
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "parent")
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 2 || !strings.Contains(runs[1].env.Reason, `publishing child job 1 of 1 to queue "nowhere"`) ||
			!strings.Contains(runs[1].env.Reason, "unknown queue") {
			t.Fatalf("runs = %+v", runs)
		}
		settled := r.settled()
		if settled[0].Settle != worker.SettleRetry {
			t.Fatalf("first settle = %v, want retry", settled[0].Settle)
		}
	})
}

func TestUndecodableMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			calls.Add(1)
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		if err := r.b.InjectMalformed(context.Background(), "q", []byte("garbage"), "attempt header is not a number"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		dl := r.dead("q")
		if calls.Load() != 0 || len(dl) != 1 || !strings.Contains(dl[0].Reason, "malformed message: attempt header is not a number") ||
			string(dl[0].Envelope.Payload) != "garbage" {
			t.Fatalf("calls %d, dead letters %+v", calls.Load(), dl)
		}
	})
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

func TestDeadlineFailsSlowJob(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			if j.Attempt == 1 {
				<-ctx.Done()
				return worker.Result{Outcome: worker.Failed, Reason: ctx.Err().Error()}
			}
			return worker.Result{}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, Timeout: 2 * time.Second})
		r.publish("q", "x")
		time.Sleep(time.Minute)
		if runs := log.all(); len(runs) != 2 || runs[1].env.Reason != "timeout after 2s" {
			t.Fatalf("runs = %+v", runs)
		}
	})
}

func TestObserverAndLogObserver(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 1 {
				return worker.Result{Outcome: worker.Retry, Reason: "later", Delay: time.Second, Version: "v1"}
			}
			return worker.Result{Version: "v2"}
		})
		r := newRig(t, worker.Config{Observer: worker.LogObserver(log)}, worker.Queue{Name: "q", Handler: h})
		env := r.publish("q", "x")
		time.Sleep(time.Minute)
		if r.eventsOf(worker.EventStarted) != 2 || r.eventsOf(worker.EventSettled) != 2 {
			t.Fatalf("events: %d started, %d settled", r.eventsOf(worker.EventStarted), r.eventsOf(worker.EventSettled))
		}
		s := r.settled()
		if s[0].Settle != worker.SettleRetry || s[0].Reason != "later" || s[0].Delay != time.Second || s[0].Result.Version != "v1" ||
			s[1].Settle != worker.SettleAck || s[1].Job.Envelope.ID != env.ID {
			t.Fatalf("settled events = %+v", s)
		}
	})
	for _, want := range []string{"level=INFO msg=\"job settled\"", "queue=q module=\"\" version=v1 attempt=1 outcome=retry settle=retry", "reason=later delay=1s",
		"level=DEBUG msg=\"job settled\"", "version=v2 attempt=2 outcome=ack settle=ack"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestNamesOfEnums(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{worker.Ack.String(), "ack"}, {worker.Failed.String(), "failed"}, {worker.Outcome(9).String(), "outcome(9)"},
		{worker.SettleDeadLetter.String(), "dead_letter"}, {worker.Settle(9).String(), "settle?"},
		{worker.EventAbandoned.String(), "abandoned"}, {worker.EventKind(9).String(), "event?"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, worker.Config{})
		ctx := context.Background()
		if err := r.w.Register(ctx, worker.Queue{Name: "q"}); err == nil || !strings.Contains(err.Error(), "nil handler") {
			t.Errorf("nil handler: %v", err)
		}
		if err := r.w.Register(ctx, worker.Queue{Name: "bad name", Handler: worker.HandlerFunc(nil)}); err == nil {
			t.Error("bad queue name accepted")
		}
		if err := r.w.Unregister(ctx, "nope"); err == nil {
			t.Error("unregistering an unknown queue succeeded")
		}
		if err := r.w.Start(ctx); err == nil {
			t.Error("second Start succeeded")
		}
		if err := r.stop(time.Second); err != nil {
			t.Fatal(err)
		}
		if err := r.w.Register(ctx, worker.Queue{Name: "q", Handler: worker.HandlerFunc(nil)}); !errors.Is(err, worker.ErrStopped) {
			t.Errorf("Register after Stop: %v", err)
		}
		if err := r.w.Stop(ctx); err == nil {
			t.Error("second Stop succeeded")
		}
	})
}
