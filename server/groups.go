package server

import (
	"context"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// MaxGroupJobs is the most tasks one workflow, and jobs one batch, may hold.
const MaxGroupJobs = 10000

// The limit above is the inspector's, written out so that godoc shows its value.
const _ = uint(MaxGroupJobs-inspect.MaxGroupJobs) + uint(inspect.MaxGroupJobs-MaxGroupJobs)

// Task is one task of a workflow: a job, its name (unique in the workflow), the tasks
// it runs after, and what a dependency that ends dead or cancelled does to it
// (backend.OnFailureCancel, the default, cancels it with a reason naming the
// dependency; backend.OnFailureRun runs it anyway).
type Task struct {
	Name string
	Job  Job
	// DependsOn names the tasks it runs after, each once.
	DependsOn           []string
	OnDependencyFailure backend.OnFailure
}

// Batch is a batch: its jobs, and callbacks that wait for all of them. OnComplete is
// published once every job has ended (succeeded, dead or cancelled: a job still
// retrying has not ended); OnSuccess once every job has succeeded, and is cancelled
// otherwise. Either may be nil. A callback reads how each job ended as a resumed
// parent reads its children.
type Batch struct {
	Jobs                  []Job
	OnComplete, OnSuccess *Job
}

// CreateWorkflow checks tasks and publishes them as one workflow, atomically, as
// POST /v1/workflows does: each task runs only after every task it depends on has
// succeeded. A name that is empty, repeated or unknown, a cycle, or a task that fails
// Enqueue's checks (a unique key among them) is an ErrInvalid error naming it, and
// nothing is stored; a backend that keeps no groups (RabbitMQ) answers ErrUnavailable.
// The record returned lists the tasks in an order they can run in; follow it with
// Workflow.
func (i *Inspector) CreateWorkflow(ctx context.Context, tasks []Task) (backend.GroupRecord, error) {
	specs := make([]inspect.TaskSpec, len(tasks))
	for k, t := range tasks {
		specs[k] = inspect.TaskSpec{Name: t.Name, Job: jobspec.Spec(t.Job), DependsOn: t.DependsOn, OnDependencyFailure: t.OnDependencyFailure}
	}
	return i.in.CreateWorkflow(ctx, specs)
}

// CreateBatch checks b and publishes it as one batch, atomically, as POST /v1/batches
// does. The record's members are the jobs, in order, then the callbacks (with their
// Role).
func (i *Inspector) CreateBatch(ctx context.Context, b Batch) (backend.GroupRecord, error) {
	spec := inspect.BatchSpec{Jobs: make([]jobspec.Spec, len(b.Jobs))}
	for k, j := range b.Jobs {
		spec.Jobs[k] = jobspec.Spec(j)
	}
	if b.OnComplete != nil {
		s := jobspec.Spec(*b.OnComplete)
		spec.OnComplete = &s
	}
	if b.OnSuccess != nil {
		s := jobspec.Spec(*b.OnSuccess)
		spec.OnSuccess = &s
	}
	return i.in.CreateBatch(ctx, spec)
}

// Workflow returns the workflow id with each task's state; an unknown id wraps
// backend.ErrNotFound.
func (i *Inspector) Workflow(ctx context.Context, id string) (backend.GroupRecord, error) {
	return i.in.Group(ctx, backend.GroupWorkflow, id)
}

// Batch returns the batch id with each job's state.
func (i *Inspector) Batch(ctx context.Context, id string) (backend.GroupRecord, error) {
	return i.in.Group(ctx, backend.GroupBatch, id)
}

// Groups lists the workflows or the batches, newest first; cursor is a page's Next.
func (i *Inspector) Groups(ctx context.Context, kind backend.GroupKind, cursor string, limit int) (backend.GroupPage, error) {
	return i.in.Groups(ctx, kind, cursor, limit)
}

// CancelGroup cancels the workflow or batch id: its jobs that have not run are
// cancelled, those running on this host stopped. One that has ended is an error
// wrapping backend.ErrJobState.
func (i *Inspector) CancelGroup(ctx context.Context, kind backend.GroupKind, id string) (backend.GroupRecord, error) {
	return i.in.CancelGroup(ctx, kind, id)
}
