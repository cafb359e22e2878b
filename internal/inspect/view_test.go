package inspect_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/inspect"
	"github.com/wasmjobs/wasmjobs/worker"
)

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
	recs.Observe(worker.Event{Kind: worker.EventSettled, Settle: worker.SettleRetry, Reason: "boom", Job: job, Duration: 5 * time.Millisecond,
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
