package backend

import (
	"context"
	"errors"
	"time"
)

// Jobs that wait for other jobs: the optional parts of the contract behind fan-in
// (a handler that settles as waiting for the children it staged), workflows (jobs
// published together, each after the ones it depends on) and batches (callbacks that
// wait for every job of a set). One mechanism serves the three: a job held in
// JobWaiting, holding no claim and no capacity, until every job it awaits has ended.
// Only a backend that keeps job records in one store can hold such a job exactly:
// RabbitMQ implements none of these, and a module or request that needs them is
// refused there with an error that says why.

// JobWaiting jobs wait for other jobs to end: a parent that settled as waiting for
// its children, or a task or callback published after jobs it depends on. A waiting
// job holds no place in its concurrency key's line (Envelope.Key): it takes one, at
// the back, when it is put on its queue. A backend counts it among the ids it holds,
// so a repeat publish of its id is dropped.
const JobWaiting JobState = "waiting"

// JobUnfinished is the State of an AwaitResult whose job had not ended when its waiter
// stopped waiting (the wait timed out).
const JobUnfinished JobState = "unfinished"

// OnFailure says what becomes of a waiting job when a job it awaits ends dead or
// cancelled.
type OnFailure string

const (
	// OnFailureCancel cancels the waiting job, with a reason naming the job that did
	// not succeed; its own waiters then see it cancelled. It is the default (the empty
	// value) of a workflow task and of a batch's on_success callback.
	OnFailureCancel OnFailure = "cancel"
	// OnFailureRun runs the waiting job anyway once every awaited job has ended: a
	// fan-in parent and a batch's on_complete callback always do.
	OnFailureRun OnFailure = "run"
)

// DefaultWaitTimeout is how long a job waits when its Await gives no Timeout: past it,
// the job runs with the awaited jobs that had not ended marked JobUnfinished.
const DefaultWaitTimeout = 24 * time.Hour

// MaxAwaitOutput is how much of each awaited job's output an AwaitResult keeps; the
// rest is cut and OutputTruncated set.
const MaxAwaitOutput = 16 << 10

// MaxAwaitTotal bounds the outputs of one job's awaited results together: past it,
// Awaited gives the later results without their output, OutputTruncated set, so that
// a wide fan-in (100,000 children of 16 KiB) cannot load gigabytes into a run.
const MaxAwaitTotal = 64 << 20

// CapAwaitTotal drops the output of each result past the first MaxAwaitTotal bytes of
// outputs, in order, marking it truncated: what Awaited does to its results.
func CapAwaitTotal(results []AwaitResult) {
	total := 0
	for i := range results {
		r := &results[i]
		if total+len(r.Output) > MaxAwaitTotal {
			r.Output, r.OutputTruncated = nil, r.OutputTruncated || len(r.Output) > 0
			continue
		}
		total += len(r.Output)
	}
}

// Await is what a job waits for before it runs.
type Await struct {
	// IDs are the jobs it waits for, each once. A job the backend has a finished record
	// of counts as ended at once, with what its record says.
	IDs []string
	// OnFailure is what a dead or cancelled awaited job does to the waiting one; empty
	// means OnFailureCancel.
	OnFailure OnFailure
	// Timeout bounds the wait from when it starts; zero means DefaultWaitTimeout.
	// Once it passed, the job runs whatever its OnFailure, with the jobs that had not
	// ended marked JobUnfinished (a wait that timed out is no failure); a job that
	// ends later changes nothing of it.
	Timeout time.Duration
}

// Dependent is one job of a PublishDependents call: a publication, and what it waits
// for (no IDs: it is published as PublishBatch publishes it).
type Dependent struct {
	Publication
	Await Await
}

// AwaitResult is how one awaited job ended, as the job that waited for it reads it.
type AwaitResult struct {
	// ID and Queue name the awaited job.
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// State is succeeded, dead or cancelled, or JobUnfinished when the wait timed out
	// before the job ended.
	State JobState `json:"state"`
	// Reason is why it did not succeed (empty when it did).
	Reason string `json:"reason,omitempty"`
	// Output is what its last run produced, up to MaxAwaitOutput; OutputTruncated says
	// it was cut.
	Output          []byte `json:"output,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
}

// ErrUnknownAwait is wrapped by the error of a publish or settle whose Await names a
// job that is neither earlier in the same call nor known to the backend (held, or
// kept as a record), or the waiting job itself. The error names the id.
var ErrUnknownAwait = errors.New("awaits an unknown job")

// DependentPublisher is implemented by backends that hold jobs until the jobs they
// await have ended.
type DependentPublisher interface {
	// PublishDependents publishes every dependent in one atomic write, all or none,
	// and returns once they are durable. A dependent without Await IDs is published as
	// PublishBatch publishes it; one with them is kept in JobWaiting and published onto
	// its queue (after its Delay, counted from then) once every awaited job has ended,
	// or cancelled as its OnFailure says. An Await ID must name a dependent earlier in
	// deps or a job the backend knows: anything else fails the whole call with
	// ErrUnknownAwait, so that no cycle can be stored. Queues and delays are checked as
	// by PublishBatch. A dependent whose awaited jobs have all ended already is
	// published at once (with their results), or cancelled at once as its OnFailure
	// says; a cancelled dependent's reason names the awaited job that did not
	// succeed. A dependent's Envelope.Round is kept as published: it is not a resumed
	// run.
	PublishDependents(ctx context.Context, deps []Dependent) error
}

// WaitingDelivery is implemented by deliveries that can settle as waiting (the
// handler's WAIT outcome).
type WaitingDelivery interface {
	AtomicDelivery
	// WaitWith publishes children in one write with the delivery's settle, as
	// AckWith does, and keeps the job in JobWaiting, holding no claim, until every job
	// of await has ended (each an id of children or a job the backend knows; the
	// Await's OnFailure is ignored: a waiting parent always runs again). It is then
	// delivered again on its queue at the same attempt, with Round one higher and
	// AwaitedDelivery giving the results. rec is as for AckWith; the record's state is
	// waiting. It fails, and behaves when ctx ends, as AtomicDelivery's settles do.
	WaitWith(ctx context.Context, children []Publication, await Await, rec *JobRecord) error
}

// AwaitedDelivery is implemented by deliveries of jobs that waited: a resumed parent,
// a workflow task or a batch callback.
type AwaitedDelivery interface {
	Delivery
	// Awaited returns how each job the delivered job last waited for ended, in the
	// order it awaited them, their outputs together at most MaxAwaitTotal (see
	// CapAwaitTotal); nil for a job that never waited. The results are kept
	// with the job until it settles (whatever the record retention), so a redelivery
	// reads them again.
	Awaited(ctx context.Context) ([]AwaitResult, error)
}

// WaitCanceller is implemented by backends that can cancel a waiting job, and with it
// the jobs it waits for.
type WaitCanceller interface {
	// CancelWaiting cancels the waiting job id with reason, as JobController.CancelJob
	// cancels a pending one; with cascade, every job it awaits that has not ended is
	// cancelled too (a running one is reported, not stopped: the caller cancels its
	// run; a waiting one is cancelled with its own cascade). It returns the ids it
	// cancelled, id first, and those of the awaited jobs still running. A job the
	// backend holds that is not waiting fails with ErrJobState, one it does not know
	// with ErrNotFound. The waiters of a cancelled job see it cancelled with reason.
	CancelWaiting(ctx context.Context, id, reason string, cascade bool) (cancelled, running []string, err error)
}

// GroupKind says what a group of jobs is.
type GroupKind string

const (
	// GroupWorkflow is a DAG of named tasks, each run after those it depends on.
	GroupWorkflow GroupKind = "workflow"
	// GroupBatch is a set of jobs with callbacks that wait for every one of them.
	GroupBatch GroupKind = "batch"
)

// Plural names groups of kind k, as the API's paths do: "workflows", "batches".
func (k GroupKind) Plural() string {
	if k == GroupBatch {
		return "batches"
	}
	return string(k) + "s"
}

// GroupState is the state of a group.
type GroupState string

const (
	// GroupRunning groups have a member that has not ended.
	GroupRunning GroupState = "running"
	// GroupSucceeded groups ended with every member succeeded.
	GroupSucceeded GroupState = "succeeded"
	// GroupFailed groups ended with a member dead, or cancelled by a dependency.
	GroupFailed GroupState = "failed"
	// GroupCancelled groups were cancelled by an operator.
	GroupCancelled GroupState = "cancelled"
)

// Roles of a group's members: a batch's callbacks are members with a role, every
// other member has none.
const (
	RoleOnComplete = "on_complete"
	RoleOnSuccess  = "on_success"
)

// GroupMember is one job of a group.
type GroupMember struct {
	// Name is a workflow task's name (empty in a batch).
	Name string `json:"name,omitempty"`
	// ID and Queue name the member's job.
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// DependsOn names the tasks it runs after (a workflow's).
	DependsOn []string `json:"depends_on,omitempty"`
	// Role is RoleOnComplete or RoleOnSuccess for a batch's callbacks, empty otherwise;
	// a callback does not count in the group's state.
	Role string `json:"role,omitempty"`
	// State is the member's job state as the backend knows it when the group is read:
	// running while a consumer holds it, final once it ended (kept in the same write
	// as the member's final settle).
	State JobState `json:"state"`
	// Reason is why it did not succeed, when it ended so.
	Reason string `json:"reason,omitempty"`
}

// GroupRecord is what a backend keeps of a group.
//
// ID is the caller's (usually NewID), and must be new to the backend. CreatedAt is set
// by the backend at PublishGroup when zero; FinishedAt when the group ends.
type GroupRecord struct {
	ID         string        `json:"id"`
	Kind       GroupKind     `json:"kind"`
	State      GroupState    `json:"state"`
	Members    []GroupMember `json:"members"`
	CreatedAt  time.Time     `json:"created_at,omitzero"`
	FinishedAt time.Time     `json:"finished_at,omitzero"`
}

// GroupPage is one page of a group listing, newest first.
type GroupPage struct {
	Groups []GroupRecord
	// Next is the cursor of the following page, empty at the end.
	Next string
}

// GroupStore is implemented by backends that keep workflows and batches.
type GroupStore interface {
	// PublishGroup publishes deps as PublishDependents does and keeps g in the same
	// write: deps[i] is the job of g.Members[i] (their ids and queues agree, or the
	// call fails before anything is written). g's State is set running and its
	// members' states pending or waiting. A group is kept, once ended, under the same
	// retention as job records.
	PublishGroup(ctx context.Context, g GroupRecord, deps []Dependent) error
	// Group returns the group id, or an error wrapping ErrNotFound.
	Group(ctx context.Context, id string) (GroupRecord, error)
	// ListGroups returns a page of the groups of kind, newest first (in the order
	// they were published, the latest first); cursor is a page's Next (empty starts
	// at the newest), limit <= 0 means DefaultJobPage.
	ListGroups(ctx context.Context, kind GroupKind, cursor string, limit int) (GroupPage, error)
	// CancelGroup marks the running group id cancelled and cancels every member that
	// has not ended and is not running, with reason; it returns the ids of members
	// still running, for the caller to cancel their runs. A waiting member is
	// cancelled whatever its OnFailure, so that no member runs after the cancel but
	// those running at it. A group that has ended fails with
	// ErrJobState, an unknown one with ErrNotFound.
	CancelGroup(ctx context.Context, id, reason string) (running []string, err error)
}
