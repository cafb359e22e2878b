package server

import (
	"context"

	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// Job is a job to enqueue: its Queue (required) and Payload, and optionally Headers,
// a Delay before it runs, a Priority (0 to backend.PriorityLevels-1, higher first),
// MaxAttempts (0: the queue's), and a UniqueKey held for UniqueFor after the job
// finishes (a second enqueue of the key while it is held queues nothing). It is the
// same job POST /v1/jobs takes, under the same rules.
type Job = jobspec.Spec

// Enqueued says what Enqueue did: IDs holds one id per job, in order, and where
// Duplicates[i] is true job i was not queued because its unique key is held, and
// IDs[i] is the id of the job that holds it.
type Enqueued = inspect.Enqueued

// Inspector is the operator's view of the host, the one the API, the dashboard and
// the CLI use: queues and their counts, jobs (get, list, cancel, retry, delete), dead
// letters (list, replay, purge), modules (list, history, promote, rollback) and
// schedules. Its methods are safe for concurrent use.
type Inspector = inspect.Inspector

// Enqueue checks and publishes jobs, as POST /v1/jobs (one job) and /v1/jobs/batch
// (several) do: the one place the enqueue rules live. Each job is checked before any
// is published: its queue must be one a serving module serves, its payload within the
// module's limit, its priority, delay and attempts in range; an error names the job
// (jobs[i]) and wraps the kind of problem. A batch is one atomic write on a backend
// that has one (pebble), all or none; elsewhere jobs are published one by one.
//
// Before Start, and from the drain's start on a backend that keeps nothing queued
// (memory), the host is not accepting: Enqueue refuses every job, publishing nothing,
// since no module serves yet or the drain would drop the job.
func (s *Server) Enqueue(ctx context.Context, jobs ...Job) (Enqueued, error) {
	if len(jobs) == 1 {
		return s.insp.Enqueue(ctx, jobs[0])
	}
	return s.insp.EnqueueBatch(ctx, jobs)
}

// Inspector returns the host's operator API (see Inspector). It answers from New on.
func (s *Server) Inspector() *Inspector { return s.insp }
