package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestRatesCountSettlesAndFailuresPerBucket(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	r := inspect.NewRates(func() time.Time { return now })
	ev := func(q string, s worker.Outcome) worker.Event {
		return worker.Event{Kind: worker.EventSettled, Settle: s, Job: &worker.Job{Envelope: backend.Envelope{Queue: q}}}
	}
	r.Observe(ev("a", worker.Ack))
	r.Observe(ev("a", worker.Retry))
	now = now.Add(inspect.RateBucket)
	r.Observe(ev("a", worker.DeadLetter))
	r.Observe(worker.Event{Kind: worker.EventStarted, Job: &worker.Job{Envelope: backend.Envelope{Queue: "a"}}})
	s := r.Series("a")
	last := len(s.Settled) - 1
	if s.Settled[last-1] != 2 || s.Failed[last-1] != 1 || s.Settled[last] != 1 || s.Failed[last] != 1 {
		t.Errorf("buckets settled %v failed %v; want 2 (1 failed) then 1 (1 failed)", s.Settled[last-1:], s.Failed[last-1:])
	}
	if s.FailureRate < 0.66 || s.FailureRate > 0.67 {
		t.Errorf("failure rate %v, want 2/3", s.FailureRate)
	}
	now = now.Add(inspect.RateBuckets * inspect.RateBucket)
	if s := r.Series("a"); s.PerMinute != 0 {
		t.Errorf("after the window passed: %v per minute, want 0", s.PerMinute)
	}
}

func TestRecordsKeepEachRunWithItsVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := inspect.NewRecords(2)
	run := func(id string, attempt int, s worker.Outcome, version string) {
		a.Observe(worker.Event{Kind: worker.EventStarted, Job: &worker.Job{Envelope: backend.Envelope{ID: id}, Attempt: attempt}})
		a.Observe(worker.Event{Kind: worker.EventSettled, Settle: s, Reason: "r" + version,
			Job: &worker.Job{Envelope: backend.Envelope{ID: id}, Attempt: attempt}, Result: worker.Result{Handler: "m", Version: version}})
	}
	attempts := func(id string) []backend.AttemptRecord {
		rec, _ := a.JobRecord(ctx, id)
		return rec.Attempts
	}
	run("a", 1, worker.Retry, "v1")
	run("a", 2, worker.Ack, "v2")
	got := attempts("a")
	if len(got) != 2 || got[0].State != backend.JobRetrying || got[0].Version != "v1" || got[1].State != backend.JobSucceeded || got[1].Version != "v2" || got[1].Attempt != 2 {
		t.Fatalf("attempts of a = %+v; want a retry on v1 then an ack on v2", got)
	}
	run("b", 1, worker.Ack, "v2")
	run("c", 1, worker.Ack, "v2")
	if attempts("a") != nil || len(attempts("c")) != 1 {
		t.Errorf("past the bound of 2 jobs the oldest must go: a %v, c %v", attempts("a"), attempts("c"))
	}
}

func TestRecordsForgetTheOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := inspect.NewRecords(3)
	var ids []string
	for range 5 {
		env := backend.NewEnvelope("q", nil)
		ids = append(ids, env.ID)
		h.Enqueued(env, false)
	}
	if h.Len() != 3 {
		t.Fatalf("len %d", h.Len())
	}
	if _, err := h.JobRecord(ctx, ids[1]); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("the second oldest is still there: %v", err)
	}
	if rec, err := h.JobRecord(ctx, ids[4]); err != nil || rec.State != backend.JobPending {
		t.Fatalf("newest %+v %v", rec, err)
	}
	h.Forget(ids[4])
	if _, err := h.JobRecord(ctx, ids[4]); err == nil || h.Len() != 2 {
		t.Fatal("Forget kept the job")
	}
}

// TestHostMemoryAnswersAsItsHistoryDid: a job the host's memory holds (a backend
// without job records) answers as the history and the attempts log it replaces did:
// durations, never the times of a run (no started_at), and each attempt's finish.
func TestHostMemoryAnswersAsItsHistoryDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Config{})
	defer b.Close(ctx)
	recs := inspect.NewRecords(10)
	in := inspect.New(inspect.Config{Backend: b, Records: recs})
	env := backend.NewEnvelope("q", []byte("x"))
	recs.Enqueued(env, false)
	job := &worker.Job{Envelope: env, Attempt: 1, MaxAttempts: 3}
	recs.Observe(worker.Event{Kind: worker.EventStarted, Job: job})
	recs.Observe(worker.Event{Kind: worker.EventSettled, Settle: worker.Retry, Reason: "boom", Job: job, Duration: 5 * time.Millisecond,
		Result: worker.Result{Handler: "m", Version: "v1", Output: []byte("out")}})
	st, err := in.Job(ctx, env.ID)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(st)
	got := string(raw)
	for _, want := range []string{`"state":"retrying"`, `"reason":"boom"`, `"output":"out"`, `"module":{"name":"m","version":"v1"}`, `"duration_ms":5,`,
		`"attempts":[{"attempt":1,"settle":"retry","reason":"boom","module":"m","version":"v1","finished_at":`, `"duration_ns":5000000}]`} {
		if !strings.Contains(got, want) {
			t.Errorf("GET /v1/jobs/{id} from the host's memory lacks %s:\n%s", want, got)
		}
	}
	var top map[string]any
	json.Unmarshal(raw, &top)
	if _, ok := top["finished_at"]; ok || strings.Contains(got, "started_at") {
		t.Errorf("GET /v1/jobs/{id} from the host's memory shows the run's times, which it never did:\n%s", got)
	}
	jobs, _, err := in.Jobs(ctx, "q", backend.JobFilter{})
	if err != nil || len(jobs) != 1 || jobs[0].Attempts != nil || jobs[0].State != "retrying" {
		t.Errorf("listing from the host's memory: %+v %v, want the job without its attempts, as the history listed it", jobs, err)
	}
}
