package server

import (
	"context"
	"errors"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// Limits of Enqueue.
const (
	// MaxBatch is the most jobs one Enqueue takes, as POST /v1/jobs/batch does.
	MaxBatch = 1000
	// MaxPriority is the highest Job.Priority: priorities run from 0 (the default) to
	// MaxPriority, higher first. The level above is the worker's, for deferred jobs.
	MaxPriority = 1
	// MaxKey bounds a job's concurrency key (Job.Key), in bytes.
	MaxKey = 512
)

// The limits and defaults above are the internal packages', written out so that godoc
// shows their values: one that differs from its source does not compile (a negative
// constant overflows uint).
const (
	_ = uint(MaxBatch-inspect.MaxBatch) + uint(inspect.MaxBatch-MaxBatch)
	_ = uint(MaxPriority-(jobspec.PriorityLevels-1)) + uint(jobspec.PriorityLevels-1-MaxPriority)
	_ = uint(DefaultHistory-api.DefaultHistory) + uint(api.DefaultHistory-DefaultHistory)
	_ = uint(MaxKey-jobspec.MaxKey) + uint(jobspec.MaxKey-MaxKey)
)

// The kinds of Enqueue's errors, for errors.Is: the error itself says what, and of
// which job. Besides these a job may meet backend.ErrUnknownQueue (no serving module
// serves its queue), backend.ErrDelayTooLong (a delay past the backend's own
// ceiling) and the backend's own errors, wrapped.
var (
	// ErrInvalid is a job that cannot be enqueued as given: a field out of range, a
	// reserved header, a bad queue name, a batch of none or of more than MaxBatch.
	ErrInvalid = inspect.ErrInvalid
	// ErrTooLarge is a payload past the limit of the module serving its queue; such an
	// error is of ErrInvalid's kind too.
	ErrTooLarge = inspect.ErrTooLarge
	// ErrDraining is a host that takes no new jobs: not started yet, draining on a
	// backend that keeps nothing queued, or stopped.
	ErrDraining = inspect.ErrDraining
	// ErrUnavailable is what the backend cannot do, such as a unique key on RabbitMQ.
	ErrUnavailable = inspect.ErrUnavailable
)

// errNotStarted refuses a job before Start: what a draining host answers, in its own
// words (a host not yet started is not shutting down).
var errNotStarted = inspect.Errorf(ErrDraining, "server: the host is not started and takes no jobs yet: enqueue once Start has returned")

// Job is a job to enqueue: the job POST /v1/jobs takes, under the same rules.
type Job struct {
	// Queue is the job's queue (required): one that a serving module serves.
	Queue string
	// Payload is the job's input, within the payload limit of the module serving Queue.
	Payload []byte
	// Headers are passed to the handler; the keys beginning "wasmjobs-" are reserved.
	Headers map[string]string
	// Delay is how long the job waits before it runs; zero runs it at once.
	Delay time.Duration
	// Priority is 0 (the default) to MaxPriority, higher first.
	Priority int
	// MaxAttempts is how many executions are allowed; zero means the queue's.
	MaxAttempts int
	// UniqueKey, when set, makes the job unique in its queue: while a job of the same
	// key and queue waits, runs or retries, or finished less than UniqueFor ago, a
	// second enqueue of the key queues nothing (Enqueued.Duplicates). Where no key can
	// hold (RabbitMQ) the job is refused with ErrUnavailable.
	UniqueKey string
	// UniqueFor is how long the key stays held after the job finished; zero frees it
	// when the job finishes.
	UniqueFor time.Duration
	// Key is the job's concurrency key, at most MaxKey bytes of UTF-8: on a queue whose
	// module sets key_concurrency N, at most N jobs of one key run at once, in the
	// order they were enqueued. It is not UniqueKey: no job of a key is dropped.
	Key string
}

// Enqueued says what Enqueue did: IDs holds one id per job, in order, and where
// Duplicates[i] is true job i was not queued because its unique key is held, and
// IDs[i] is the id of the job that holds it. Duplicates is nil when no job had a key.
type Enqueued struct {
	IDs        []string
	Duplicates []bool
}

// Queued counts the jobs queued (not duplicates).
func (e Enqueued) Queued() int { return inspect.Enqueued(e).Queued() }

// PartialError is an Enqueue of several jobs that failed or that the drain overtook,
// or of a unique one that failed, with the ids the caller should know of: those accepted
// before the failure or, where the write may have landed whole, every id to look up
// (Inspector.Job). IDs is empty (not nil) where none was accepted. Take it with
// errors.As.
type PartialError struct {
	IDs []string
	Err error
}

// Error is the wrapped error's message.
func (e *PartialError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PartialError) Unwrap() error { return e.Err }

// Enqueue checks and publishes jobs, as POST /v1/jobs (one job) and /v1/jobs/batch
// (several) do: the one place the enqueue rules live. It takes 1 to MaxBatch jobs,
// each checked before any is published: its queue must be one a serving module
// serves, its payload within the module's limit, its priority, delay and attempts in
// range. The error of a check wraps its kind (ErrInvalid, ErrTooLarge,
// backend.ErrUnknownQueue); in a batch of several it names the job ("jobs[i]: ").
// A batch is one atomic write on a backend that has one (pebble), all or none;
// elsewhere jobs are published one by one, and a failure part way is a *PartialError
// with the ids accepted before it.
//
// Before Start, and from the drain's start on a backend that keeps nothing queued
// (memory), the host is not accepting: Enqueue refuses every job with ErrDraining
// (before Start, or after a failed one, with a message saying so), publishing
// nothing, since no module serves yet or the drain would drop the job. A
// backend that keeps jobs (pebble, RabbitMQ) takes them through the drain, for the
// next start, until Stop closes it.
func (s *Server) Enqueue(ctx context.Context, jobs ...Job) (Enqueued, error) {
	var res inspect.Enqueued
	var err error
	if len(jobs) == 1 {
		res, err = s.insp.Enqueue(ctx, jobspec.Spec(jobs[0]))
	} else {
		specs := make([]jobspec.Spec, len(jobs))
		for i, j := range jobs {
			specs[i] = jobspec.Spec(j)
		}
		res, err = s.insp.EnqueueBatch(ctx, specs)
	}
	var pe *inspect.PartialError
	if errors.As(err, &pe) && err == error(pe) {
		err = &PartialError{IDs: pe.IDs, Err: pe.Err}
	}
	return Enqueued(res), err
}

// Inspector returns the host's operator API (see Inspector). It answers from New on.
func (s *Server) Inspector() *Inspector { return &Inspector{in: s.insp} }
