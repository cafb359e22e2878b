package backend

import (
	"context"
	"time"
)

// Optional parts of the contract, for backends that write to a store of their own. Each
// has its own rules in backendtest, run only on backends that implement it; the worker
// and the API use them where a backend has them and the plain contract where not.

// Publication is one job of a batch publish or one child of a settle: the envelope and
// the delay before it is ready (zero for none).
type Publication struct {
	Envelope Envelope
	Delay    time.Duration
}

// BatchPublisher is implemented by backends that publish several jobs in one atomic
// write.
type BatchPublisher interface {
	// PublishBatch publishes every publication, all or nothing, and returns once they are
	// durable. A publication to a queue never declared fails the whole batch with an
	// error wrapping ErrUnknownQueue that names the queue; an empty batch does nothing.
	// When ctx ends first the error says so and the batch may still be published, whole.
	PublishBatch(ctx context.Context, pubs []Publication) error
}

// AtomicDelivery is implemented by deliveries that settle in one atomic write together
// with the job's children and its record. Each method settles the delivery exactly once
// like its plain counterpart (a second settle fails with ErrAlreadySettled), and, when it
// fails, leaves the delivery unsettled with nothing of it written, with one exception:
// when ctx ends while the write is in flight, the method returns an error wrapping
// ErrSettleUnknown, the write may still land, and the delivery must not be settled
// again (if the write fails after all, the job goes back to its queue).
//
// rec, when not nil, carries what the consumer knows of the run: output, log lines,
// module, start and finish times. The backend sets the record's identity, state,
// attempt, reason and children itself, and caps output and logs.
type AtomicDelivery interface {
	Delivery
	// AckWith acknowledges the delivery and publishes children in the same write: the
	// ack and every child are kept, or none of them. A child to a queue never declared
	// fails it with ErrUnknownQueue naming the queue. A child whose id the backend still
	// holds is not published again.
	AckWith(ctx context.Context, children []Publication, rec *JobRecord) error
	// RetryWith is Retry, writing rec in the same write.
	RetryWith(ctx context.Context, next Envelope, delay time.Duration, rec *JobRecord) error
	// DeferWith is Defer, writing rec in the same write.
	DeferWith(ctx context.Context, next Envelope, delay time.Duration, rec *JobRecord) error
	// DeadLetterWith is DeadLetter, writing rec in the same write.
	DeadLetterWith(ctx context.Context, reason string, rec *JobRecord) error
}

// CancellableDelivery is implemented by deliveries that can be settled as cancelled: an
// operator stopped the job while it ran. The worker settles a cancelled job through it
// where a delivery has it and with a plain Ack where not (RabbitMQ keeps nothing of a
// settled job, so an ack says all it can).
type CancellableDelivery interface {
	Delivery
	// Cancel settles the delivery as cancelled, exactly once like every settle (a
	// second settle fails with ErrAlreadySettled): the job leaves its queue, is never
	// retried and publishes no child. A backend that keeps job records writes the
	// record as JobCancelled with reason, and appends the attempt as every settle does,
	// in the same write; rec is as for AtomicDelivery's settles and may be nil. When it
	// fails, and when ctx ends while its write is in flight, it behaves as
	// AtomicDelivery's settles do.
	Cancel(ctx context.Context, reason string, rec *JobRecord) error
}

// JobState is the state of a job in its record.
type JobState string

// States of a job record.
const (
	// JobPending jobs are ready to be delivered.
	JobPending JobState = "pending"
	// JobDelayed jobs wait for the delay they were published with.
	JobDelayed JobState = "delayed"
	// JobRunning jobs were handed to a consumer and are not settled yet.
	JobRunning JobState = "running"
	// JobSucceeded jobs were acknowledged.
	JobSucceeded JobState = "succeeded"
	// JobRetrying jobs failed and wait for their next attempt.
	JobRetrying JobState = "retrying"
	// JobDeferred jobs were deferred and wait to come back.
	JobDeferred JobState = "deferred"
	// JobDead jobs were dead-lettered.
	JobDead JobState = "dead"
	// JobCancelled jobs were cancelled by an operator: before they ran
	// (JobController.CancelJob) or while they ran (CancellableDelivery.Cancel).
	JobCancelled JobState = "cancelled"
)

// Finished reports whether the state is final: succeeded, dead or cancelled.
func (s JobState) Finished() bool { return s == JobSucceeded || s == JobDead || s == JobCancelled }

// JobRecord is what a backend keeps of one job: its latest state and what its last run
// left, so that a job can be looked up after it left the queue, and after a restart.
type JobRecord struct {
	ID          string   `json:"id"`
	Queue       string   `json:"queue"`
	State       JobState `json:"state"`
	Attempt     int      `json:"attempt"`
	MaxAttempts int      `json:"max_attempts,omitempty"`
	// Reason is the last failure reason, or why the job was dead-lettered.
	Reason string `json:"reason,omitempty"`
	// Output is what the last run produced, up to the backend's cap; OutputTruncated
	// says it was cut.
	Output          []byte `json:"output,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	// Logs are the guest's log lines of the last run, up to the backend's cap;
	// LogsTruncated says lines were dropped.
	Logs          []string `json:"logs,omitempty"`
	LogsTruncated bool     `json:"logs_truncated,omitempty"`
	// Module and ModuleVersion name the handler that last ran the job; ModuleRole is
	// which of its versions that was, "current" or "canary", when a canary rollout
	// was running (empty otherwise).
	Module        string `json:"module,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"`
	ModuleRole    string `json:"module_role,omitempty"`
	// CreatedAt is when the job was first enqueued; StartedAt and FinishedAt bound its
	// last run; UpdatedAt is when the record was last written.
	CreatedAt  time.Time `json:"created_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	// Children are the ids of the jobs published with the job's ack.
	Children []string `json:"children,omitempty"`
	// Calls are the calls the run made to other services (worker.Result.Calls) and
	// CallsDropped those past the consumer's bound, for the attempt a settle appends:
	// the backend keeps them with that attempt (AttemptRecord.Calls), up to
	// MaxRecordCalls, and a record read back has them there only.
	Calls        []CallRecord `json:"-"`
	CallsDropped int          `json:"-"`
	// TraceID is the trace id of the run a settle appends, kept with its attempt
	// (AttemptRecord.TraceID) as Calls are.
	TraceID string `json:"-"`
	// Attempts are the job's settled attempts, oldest first, the latest
	// MaxRecordAttempts of them: the backend appends one in each settle's write, from
	// the run's module, version, role and times and the settle's state and reason. A
	// consumer never sets it (a settle ignores what it passes).
	Attempts []AttemptRecord `json:"attempts,omitempty"`
}

// MaxRecordAttempts is how many attempts a job record keeps, the latest: a job that
// ran more often keeps its last 25 (its Attempt still counts them all).
const MaxRecordAttempts = 25

// AttemptRecord is one settled attempt of a job, as its record keeps it.
type AttemptRecord struct {
	// Attempt is the attempt's number, from 1.
	Attempt int `json:"attempt"`
	// State is what the settle made of the job: succeeded, retrying, deferred, dead or
	// cancelled.
	State JobState `json:"state"`
	// Reason is the failure reason, or why the job was dead-lettered or deferred.
	Reason string `json:"reason,omitempty"`
	// Module, Version and Role name the handler version that ran the attempt (Role is
	// "current" or "canary" during a rollout, else empty).
	Module  string `json:"module,omitempty"`
	Version string `json:"version,omitempty"`
	Role    string `json:"role,omitempty"`
	// StartedAt and FinishedAt bound the run.
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Calls are the calls the run made to other services, in the order they started,
	// the first MaxRecordCalls; CallsDropped counts the rest.
	Calls        []CallRecord `json:"calls,omitempty"`
	CallsDropped int          `json:"calls_dropped,omitempty"`
	// TraceID is the trace of the run's process span (hex), when the host traced it.
	TraceID string `json:"trace_id,omitempty"`
}

// MaxRecordCalls is how many calls of one attempt a record keeps, the first.
const MaxRecordCalls = 50

// CallRecord is one call a run made to another service (a module's outbound HTTP
// request): what was called and how it ended, never a header, query string or body.
type CallRecord struct {
	// Method is the call's verb, such as GET.
	Method string `json:"method"`
	// Target is the service called, such as https://api.example.com:443.
	Target string `json:"target"`
	// Path is what was called there, without a query string.
	Path string `json:"path,omitempty"`
	// Status is the answer's status; 0 when none came.
	Status int `json:"status,omitempty"`
	// Error is how the call failed, a short label ("timeout", "denied"); empty when
	// it did not.
	Error string `json:"error,omitempty"`
	// Duration is how long the call took.
	Duration time.Duration `json:"duration_ns"`
	// Bytes are the bytes of the answer the handler read.
	Bytes int64 `json:"bytes,omitempty"`
}

// JobRecordReader is implemented by backends that keep job records, written in the same
// atomic writes as the publishes and settles they describe. Such a backend knows the ids
// of the jobs it holds, and so drops a repeat publish of an id it still holds (waiting,
// delayed or handed out), reporting success: a retried parent can publish its children
// again under the same ids without doubling them.
type JobRecordReader interface {
	// JobRecord returns the record of the job with id id, or an error wrapping
	// ErrNotFound when the backend has none (never had, or pruned it).
	JobRecord(ctx context.Context, id string) (JobRecord, error)
}

// UniquePublication is a publication that holds a key of its queue: while a job
// published with the same Key to the same queue is waiting, delayed, running or
// retrying, or finished (acknowledged or dead-lettered) less than For ago, publishing
// another is a duplicate and queues nothing.
type UniquePublication struct {
	Publication
	// Key is the job's unique key within its queue; empty publishes the job as
	// Publish does, holding no key.
	Key string
	// For is how long the key stays held after its job finished; zero frees it when
	// the job finishes.
	For time.Duration
}

// UniqueResult is what became of one UniquePublication.
type UniqueResult struct {
	// ID is the id of the job that holds the key: the publication's own, or, when
	// Duplicate, the existing job's.
	ID string
	// Duplicate says the key was held and nothing was queued.
	Duplicate bool
}

// UniquePublisher is implemented by backends that publish jobs unique by key, exactly:
// the check of the key and the publish are one step, so that of any number of
// concurrent publications of one key exactly one is queued. A dead letter's key stays
// held for For after it died; replaying it does not hold the key again. Keys survive a
// restart wherever the jobs do, and are forgotten once their For has passed.
type UniquePublisher interface {
	// PublishUnique publishes each publication that is not a duplicate and reports,
	// in order, what became of each; a publication repeating the key of an earlier one
	// in pubs is its duplicate. Queues and delays are checked as by PublishBatch
	// before anything is published. A backend that is also a BatchPublisher publishes
	// the queued ones in one atomic write, all or none; one that is not publishes
	// them one by one and, on an error, returns the results of those before it.
	PublishUnique(ctx context.Context, pubs []UniquePublication) ([]UniqueResult, error)
}

// ScheduleStore is implemented by backends that keep the last fired tick of each
// periodic schedule, so that the one host they serve neither repeats nor loses a tick
// across a restart. The scheduler (internal/schedule) fires through it.
type ScheduleStore interface {
	// ScheduleTicks returns the last fired tick of every schedule the store knows, by
	// schedule name.
	ScheduleTicks(ctx context.Context) (map[string]time.Time, error)
	// PublishTick publishes env (with no delay) and records tick as the last fired
	// tick of schedule, in one atomic write where the backend has one: after a crash
	// either both are kept or neither. A repeat of an id the backend still holds is
	// not published again, and the tick is still recorded.
	PublishTick(ctx context.Context, schedule string, tick time.Time, env Envelope) error
}

// SchedulePruner is implemented by a ScheduleStore that forgets the ticks of schedules
// that no longer exist, rather than carry them for ever (the RabbitMQ leadership token
// re-publishes every tick it holds). The scheduler tells it the current set whenever it
// changes while the scheduler fires through the store.
type SchedulePruner interface {
	// KeepSchedules names the schedules whose ticks the store keeps, by schedule name;
	// the store drops the others' ticks at its next write. It does no I/O.
	KeepSchedules(schedules []string)
}

// JobFilter selects the jobs of one queue that JobLister.ListJobs returns.
type JobFilter struct {
	// State keeps only jobs in this state; empty keeps every state.
	State JobState
	// Cursor continues a listing: the Next of the previous page; empty starts at the
	// newest job.
	Cursor string
	// Limit is the most jobs a page holds; zero or less means DefaultJobPage.
	Limit int
}

// DefaultJobPage is the page size of a JobFilter without a limit.
const DefaultJobPage = 50

// JobPage is one page of a listing, newest job first.
type JobPage struct {
	Jobs []JobRecord
	// Next is the cursor of the following page, empty at the end. A page may hold
	// fewer jobs than the limit and still have a Next: a backend bounds the records it
	// reads for one page, so that a rare state cannot make one request read the whole
	// store.
	Next string
}

// JobLister is implemented by backends that list a queue's jobs from their records.
type JobLister interface {
	// ListJobs returns a page of the declared queue's jobs that match f, newest first
	// (by id: ids sort by creation time). An unknown queue fails with ErrUnknownQueue.
	ListJobs(ctx context.Context, queue string, f JobFilter) (JobPage, error)
}

// JobController is implemented by backends that can act on one held job by id: what an
// operator does from the dashboard. Each method fails with an error wrapping
// ErrNotFound when the backend holds no such job, and ErrJobState when the job's state
// does not allow the action (a running job can be neither cancelled nor deleted).
type JobController interface {
	// CancelJob removes a pending or delayed (or deferred, or retrying) job before it
	// runs; a backend with job records keeps its record as cancelled.
	CancelJob(ctx context.Context, id string) error
	// RetryJobNow makes a job that waits for its next attempt (retrying, delayed or
	// deferred) ready now, or puts a dead letter back as a fresh job (as
	// DeadLetterStore.ReplayDeadLetter).
	RetryJobNow(ctx context.Context, id string) error
	// DeleteJob removes the job and what is kept of it: a waiting job is cancelled
	// first, a dead letter goes, and its record is deleted.
	DeleteJob(ctx context.Context, id string) error
}

// JobEnvelopeReader is implemented by backends that can give back the envelope
// (payload, headers) of a job they hold: waiting (pending, delayed, deferred, retrying)
// or dead-lettered. Job records keep no payload, so a finished or running job's is not
// available.
type JobEnvelopeReader interface {
	// JobEnvelope returns the envelope of the held job id, or an error wrapping
	// ErrNotFound when the backend holds no such job waiting or dead.
	JobEnvelope(ctx context.Context, id string) (Envelope, error)
}

// StoreReporter is implemented by backends that can say how much their store holds
// beyond the queues' counts (StatsReader), for the host's metrics.
type StoreReporter interface {
	// StoreStats reads the store's sizes now.
	StoreStats(ctx context.Context) (StoreStats, error)
}

// StoreStats is what a store holds, as StoreReporter reads it.
type StoreStats struct {
	// Bytes is the size on disk of each of the store's tables, by name, their indexes
	// and any out-of-line storage included.
	Bytes map[string]int64
	// Records counts the finished jobs' records kept.
	Records int
	// UniqueKeys counts the unique keys kept, held or ended and not yet pruned.
	UniqueKeys int
	// Pruned counts the records and keys this backend pruned since it opened.
	Pruned uint64
}
