package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
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
				h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
				h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
		h := log.script(worker.Result{Outcome: worker.Defer, Delay: time.Second}, worker.Result{Outcome: worker.Failed, Reason: "x"})
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
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
		if settled[0].Settle != worker.Retry {
			t.Fatalf("first settle = %v, want retry", settled[0].Settle)
		}
	})
}

func TestUndecodableMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := counting(&calls)
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

func TestDeadlineFailsSlowJob(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := log.handler(func(ctx context.Context, j *worker.Job) worker.Result {
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
		if s[0].Settle != worker.Retry || s[0].Reason != "later" || s[0].Delay != time.Second || s[0].Result.Version != "v1" ||
			s[1].Settle != worker.Ack || s[1].Job.Envelope.ID != env.ID {
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

// TestEveryDeliveryStartsBeforeItEnds: each delivery, one that cannot be decoded too,
// reports EventStarted and then exactly one ending event, so observers can count what
// is in flight.
func TestEveryDeliveryStartsBeforeItEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			return worker.Result{Outcome: worker.Ack}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		r.publish("q", "fine")
		if err := r.b.InjectMalformed(context.Background(), "q", []byte("garbage"), "attempt header is not a number"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r.stop(0)
		r.mu.Lock()
		defer r.mu.Unlock()
		started := map[string]bool{}
		ended := map[string]int{}
		for _, e := range r.events {
			id := e.Job.Envelope.ID
			if e.Kind == worker.EventStarted {
				if started[id] {
					t.Errorf("job %s started twice", id)
				}
				started[id] = true
				continue
			}
			if !started[id] {
				t.Errorf("job %s: %s without started before it", id, e.Kind)
			}
			ended[id]++
		}
		if len(started) != 2 || len(ended) != 2 {
			t.Fatalf("started %v, ended %v: want both jobs to start and end", started, ended)
		}
		for id, n := range ended {
			if n != 1 {
				t.Errorf("job %s ended %d times", id, n)
			}
		}
	})
}

func TestNamesOfEnums(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{worker.Ack.String(), "ack"}, {worker.Failed.String(), "failed"}, {worker.Outcome(9).String(), "outcome(9)"},
		{worker.DeadLetter.String(), "dead_letter"}, {worker.Cancelled.String(), "cancelled"}, {worker.Wait.String(), "wait"},
		{worker.EventAbandoned.String(), "abandoned"}, {worker.EventKind(9).String(), "event?"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// An outage's defers do not count toward MaxDefers; the outage's start is kept from
// the first of them across those that follow, and any other settle drops it.
func TestOutageDefersAreNotCountedAndKeepTheirStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		outage := worker.Result{Outcome: worker.Defer, Outage: true, Delay: time.Second, Reason: "circuit open"}
		h := log.script(outage, outage, outage, outage, outage, // five outage defers: more than MaxDefers
			worker.Result{Outcome: worker.Defer, Delay: time.Second}) // an ordinary defer ends the outage
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, MaxDefers: 2})
		start := time.Now()
		r.publish("q", "x")
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 7 {
			t.Fatalf("%d runs, want 7 (5 outage defers, 1 defer, the ack); dead letters %+v", len(runs), r.dead("q"))
		}
		for i, run := range runs {
			j := worker.Job{Envelope: run.env}
			since, ok := j.OutageSince()
			switch {
			case i == 0 || i == 6:
				if ok {
					t.Errorf("run %d: outage since %v, want none", i, since)
				}
			case !ok || !since.Equal(start.Truncate(time.Millisecond)):
				t.Errorf("run %d: outage since %v (%v), want the first defer's %v", i, since, ok, start)
			}
			wantDefers := 0
			if i == 6 {
				wantDefers = 1
			}
			if run.attempt != 1 || run.env.Defers != wantDefers {
				t.Errorf("run %d: attempt %d defers %d, want 1 and %d", i, run.attempt, run.env.Defers, wantDefers)
			}
		}
		if len(r.dead("q")) != 0 {
			t.Fatalf("dead letters: %+v", r.dead("q"))
		}
	})
}

// A retry ends the outage too: the next run waits out no outage.
func TestRetryDropsOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := log.script(worker.Result{Outcome: worker.Defer, Outage: true, Delay: time.Second}, worker.Result{Outcome: worker.Retry, Delay: time.Second})
		newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h}).publish("q", "x")
		time.Sleep(time.Minute)
		runs := log.all()
		if len(runs) != 3 {
			t.Fatalf("%d runs, want 3", len(runs))
		}
		if _, ok := (&worker.Job{Envelope: runs[1].env}).OutageSince(); !ok {
			t.Errorf("run 2 waits out no outage, want the one of run 1")
		}
		if since, ok := (&worker.Job{Envelope: runs[2].env}).OutageSince(); ok {
			t.Errorf("run 3 after a retry: outage since %v, want none", since)
		}
	})
}

// A staged delay, a defer's or a retry's, is capped at the queue's Backoff.Cap: a
// Retry-After of two days does not park a job past the queue's longest wait.
func TestDeferDelayCappedAtBackoffCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		outcome   worker.Outcome
		delay     time.Duration
		outage    bool
		wantAfter time.Duration
	}{
		{"two days", worker.Defer, 48 * time.Hour, false, time.Hour},
		{"an outage's two days", worker.Defer, 48 * time.Hour, true, time.Hour},
		{"under the cap", worker.Defer, 10 * time.Minute, false, 10 * time.Minute},
		{"a retry's two days", worker.Retry, 48 * time.Hour, false, time.Hour},
		{"a retry under the cap", worker.Retry, 10 * time.Minute, false, 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var log runLog
				h := log.script(worker.Result{Outcome: tc.outcome, Outage: tc.outage, Delay: tc.delay})
				r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h, Backoff: worker.Backoff{Cap: time.Hour}})
				r.publish("q", "x")
				time.Sleep(3 * time.Hour)
				runs := log.all()
				if len(runs) != 2 {
					t.Fatalf("%d runs in 3h, want 2: the %v of %v is capped at the queue's 1h", len(runs), tc.outcome, tc.delay)
				}
				if got := runs[1].at.Sub(runs[0].at); got != tc.wantAfter {
					t.Fatalf("ran again after %v, want %v", got, tc.wantAfter)
				}
			})
		})
	}
}

// TestPartialChildPublishIsNotRepeated: child 2 of 3 fails to publish (its queue is
// not declared yet), so the parent is retried and publishes all three again. The
// children keep the ids derived from the parent and their index, so child 1, still
// queued, is not published a second time under a new id.
func TestPartialChildPublishIsNotRepeated(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var b *memory.Backend
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 2 {
				if err := b.Declare(ctx, backend.QueueConfig{Name: "later"}); err != nil {
					return worker.Result{Outcome: worker.DeadLetter, Reason: err.Error()}
				}
			}
			return worker.Result{Children: []worker.Child{
				{Queue: "child", Payload: []byte("1")},
				{Queue: "later", Payload: []byte("2")},
				{Queue: "child", Payload: []byte("3")},
			}}
		})
		r := newRig(t, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		b = r.b
		if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
			t.Fatal(err)
		}
		parent := r.publish("q", "parent")
		time.Sleep(time.Minute)
		synctest.Wait()
		if s := r.settled(); len(s) != 2 || s[0].Settle != worker.Retry || s[1].Settle != worker.Ack {
			t.Fatalf("settles %+v, want a retry then an ack", s)
		}
		var got []string
		for _, q := range []string{"child", "later"} {
			pending, err := r.b.Pending(q)
			if err != nil {
				t.Fatal(err)
			}
			for _, env := range pending {
				got = append(got, string(env.Payload)+"="+env.ID)
			}
		}
		slices.Sort(got)
		want := []string{"1=" + backend.ChildID(parent.ID, 0, 0, "child", []byte("1")), "2=" + backend.ChildID(parent.ID, 0, 1, "later", []byte("2")),
			"3=" + backend.ChildID(parent.ID, 0, 2, "child", []byte("3"))}
		if !slices.Equal(got, want) {
			t.Fatalf("children queued %v, want each once with its derived id %v", got, want)
		}
	})
}

// TestRetriedParentWithADifferentChild: a retried parent that stages another child at
// an index than its first attempt did (here another payload) publishes a new job: the
// backend does not drop it as a repeat of the first attempt's child, still queued.
// The deliveries are plain, so that the first attempt's children are published one by
// one and the first stays when the second fails (an atomic settle publishes none).
func TestRetriedParentWithADifferentChild(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			if j.Attempt == 1 {
				return worker.Result{Children: []worker.Child{
					{Queue: "child", Payload: []byte("first attempt")},
					{Queue: "undeclared", Payload: []byte("fails")},
				}}
			}
			return worker.Result{Children: []worker.Child{{Queue: "child", Payload: []byte("second attempt")}}}
		})
		r := newRigOn(t, plainDeliveries, worker.Config{}, worker.Queue{Name: "q", Handler: h})
		if err := r.b.Declare(context.Background(), backend.QueueConfig{Name: "child"}); err != nil {
			t.Fatal(err)
		}
		r.publish("q", "parent")
		time.Sleep(time.Minute)
		synctest.Wait()
		if s := r.settled(); len(s) != 2 || s[0].Settle != worker.Retry || s[1].Settle != worker.Ack {
			t.Fatalf("settles %+v, want a retry then an ack", s)
		}
		pending, err := r.b.Pending("child")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, env := range pending {
			got = append(got, string(env.Payload))
		}
		slices.Sort(got)
		if want := []string{"first attempt", "second attempt"}; !slices.Equal(got, want) {
			t.Fatalf("children queued %q, want %q: a different child is a new job", got, want)
		}
	})
}
