package worker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/worker"
)

// An outage's defers do not count toward MaxDefers; the outage's start is kept from
// the first of them across those that follow, and any other settle drops it.
func TestOutageDefersAreNotCountedAndKeepTheirStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log runLog
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			switch n := len(log.all()); {
			case n <= 5: // five outage defers: more than MaxDefers
				return worker.Result{Outcome: worker.Defer, Outage: true, Delay: time.Second, Reason: "circuit open"}
			case n == 6: // an ordinary defer ends the outage
				return worker.Result{Outcome: worker.Defer, Delay: time.Second}
			}
			return worker.Result{}
		})
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
		h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
			log.add(j)
			switch len(log.all()) {
			case 1:
				return worker.Result{Outcome: worker.Defer, Outage: true, Delay: time.Second}
			case 2:
				return worker.Result{Outcome: worker.Retry, Delay: time.Second}
			}
			return worker.Result{}
		})
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
				h := worker.HandlerFunc(func(ctx context.Context, j *worker.Job) worker.Result {
					log.add(j)
					if len(log.all()) == 1 {
						return worker.Result{Outcome: tc.outcome, Outage: tc.outage, Delay: tc.delay}
					}
					return worker.Result{}
				})
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
