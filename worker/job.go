package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Job is one execution of a job, as a handler sees it.
type Job struct {
	// Envelope is the job as it was delivered. Its Payload and Headers belong to the
	// worker: a handler reads them and must not modify them.
	Envelope backend.Envelope
	// Attempt is the 1-based number of this execution.
	Attempt int
	// MaxAttempts is how many executions are allowed before the job is dead-lettered.
	MaxAttempts int
	// Round counts the job's waits that have ended (Envelope.Round): zero on a first
	// run, n on the run resumed after its n-th Wait, at the same Attempt.
	Round int
	// Awaited is how each child the job's last Wait awaited ended, in the order they
	// were staged; nil on a first run.
	Awaited []backend.AwaitResult

	span  trace.Span   // the process span; nil when the worker traces nothing
	sends []trace.Span // its children's send spans, ended by the settle that publishes them
}

// OutageSince returns when the outage the job waits out began: the time the worker
// kept in OutageHeader at the first of the job's unbroken run of outage defers
// (Result.Outage). It reports false when the job waits out no outage.
func (j *Job) OutageSince() (time.Time, bool) {
	ms, err := strconv.ParseInt(j.Envelope.Headers[OutageHeader], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// Outcome is how an attempt of a job ended: the handler's verdict (Result.Outcome, any
// of the first five, or Wait) and how the worker settled the job (Event.Settle, never
// Failed: a failure is settled as a retry or a dead letter; Cancelled only there). Its
// names (String) are the settles of the API, the logs and the metric labels.
type Outcome int

// The outcomes of a handler. The zero value is Ack.
const (
	// Ack: the job is done. Its child jobs are published, then it is acknowledged.
	Ack Outcome = iota
	// Retry: run the job again after Result.Delay, else the queue's backoff.
	Retry
	// Defer: run the job again after Result.Delay, ahead of the backlog, without
	// consuming an attempt. A Defer without a delay is a failure.
	Defer
	// DeadLetter: move the job to its queue's dead letters with Result.Reason.
	DeadLetter
	// Failed: the handler failed (an error, a trap, a timeout). The job is retried with
	// the queue's backoff; Result.Delay does not apply.
	Failed
	// Cancelled: an operator cancelled the job while it ran (Worker.Cancel). It is a
	// settle, never a verdict (a handler that returns it fails): the job leaves its
	// queue, never retried, and what it staged is dropped.
	Cancelled
	// Wait: publish the children, as Ack does, and hold the job, holding no capacity,
	// until every child with Await set has ended (or Result.WaitTimeout passes); it then
	// runs again at the same attempt, with Job.Round one higher and Job.Awaited saying
	// how each ended. A Wait without an awaited child is a failure, and so is one on a
	// backend whose deliveries cannot wait (backend.WaitingDelivery).
	Wait
)

var outcomeNames = [...]string{"ack", "retry", "defer", "dead_letter", "failed", "cancelled", "wait"}

// String returns the outcome's name: ack, retry, defer, dead_letter, failed,
// cancelled or wait.
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Child is a job a handler asks to enqueue when its own job succeeds.
type Child struct {
	// Queue is the child's queue; it must be declared.
	Queue string
	// Payload is the child's payload.
	Payload []byte
	// Headers are the child's headers, if any.
	Headers map[string]string
	// Delay holds the child back for this long after it is published.
	Delay time.Duration
	// Await makes the child one that a Wait of its parent waits for; on Ack it is
	// published as any other child, awaited by nothing.
	Await bool
}

// Result is a handler's verdict on a job.
type Result struct {
	// Outcome decides how the job is settled.
	Outcome Outcome
	// Reason says why, for Retry, Defer, DeadLetter and Failed.
	Reason string
	// Delay is the wait before the job runs again, for Retry and Defer. Zero means none
	// staged: Retry then uses the queue's backoff. A Defer's delay is capped at the
	// queue's Backoff.Cap.
	Delay time.Duration
	// Outage, on a Defer, says the job waits out an outage of a dependency (or another
	// wait that is not the job's doing, such as a limit of the host's own): the defer
	// does not count toward MaxDefers, and the worker keeps when the outage began (the
	// first of an unbroken run of such defers) in OutageHeader, so that the handler
	// can bound the total wait (Job.OutageSince). Any other settle ends the outage.
	Outage bool
	// Output is what the job produced, kept with its state for inspection.
	Output []byte
	// Children are published, each confirmed, before the job is acknowledged; only on
	// Ack or Wait. If one cannot be published the job is retried instead.
	Children []Child
	// WaitTimeout bounds a Wait: past it the job runs again with the awaited children
	// that had not ended marked backend.JobUnfinished. Zero means
	// backend.DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Handler and Version name the handler that ran the job and its version, such as a
	// module's name and sha256; they are passed on in events and logs.
	Handler, Version string
	// Role says which of the handler's versions ran the job when it has more than one,
	// such as "current" or "canary" while a module's new version is on trial; empty
	// otherwise. It is a metric label, so it takes few values.
	Role string
	// Logs are the log lines the handler wants kept with the job's record, oldest
	// first; a backend that keeps records stores them (up to its own cap), any other
	// ignores them. The handler bounds how many it returns.
	Logs []string
	// Calls are the calls the handler made to other services during the run (a Wasm
	// module's outbound HTTP requests, say), in the order they started, for the
	// attempt's record; a backend that keeps records stores them with the attempt (up
	// to its own cap), any other ignores them. The handler bounds how many it returns;
	// CallsDropped counts the calls it made past that bound.
	Calls        []Call
	CallsDropped int
}

// Call is one call a handler made to another service during a run, as a job's record
// keeps it: what was called and how it ended, and nothing secret. It holds no header,
// query string or body.
type Call struct {
	// Method is the call's verb, such as GET.
	Method string
	// Target is the service called, such as https://api.example.com:443.
	Target string
	// Path is what was called there, without a query string.
	Path string
	// Status is the service's answer, such as an HTTP status; 0 when none came.
	Status int
	// Error is how the call failed, a short label such as "timeout" or "denied"; empty
	// when it did not. A call can have a Status and an Error (an answer cut short).
	Error string
	// Duration is how long the call took.
	Duration time.Duration
	// Bytes are the bytes of the answer the handler read.
	Bytes int64
}

// Handler runs jobs. Handle is called concurrently from many goroutines; ctx is
// cancelled when the job's deadline passes, the worker's drain timeout runs out, or an
// operator cancels the job (Worker.Cancel; its cause is then ErrCancelled).
type Handler interface {
	Handle(ctx context.Context, job *Job) Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) Result

// Handle calls f(ctx, job).
func (f HandlerFunc) Handle(ctx context.Context, job *Job) Result { return f(ctx, job) }

// Readier is implemented by handlers that cannot always take a job. The worker takes a
// delivery for the handler's queue only while Ready reports true, and asks again every
// Config.ReadyPoll while it reports false.
type Readier interface {
	Ready() bool
}

// Middleware wraps a handler, as net/http middleware wraps an http.Handler.
type Middleware func(Handler) Handler
