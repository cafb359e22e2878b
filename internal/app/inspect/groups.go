package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Limits of workflows and batches.
const (
	// MaxGroupJobs bounds the tasks of one workflow and the jobs of one batch.
	MaxGroupJobs = 10000
	// MaxTaskName bounds a workflow task's name, in bytes.
	MaxTaskName = 128
)

// errGroupsUnsupported answers a workflow or batch on a backend that cannot hold a job
// until others end, rather than run its tasks in no order.
var errGroupsUnsupported = errorf(ErrUnavailable,
	"workflows and batches are not supported by this backend: it cannot hold a task until the jobs it depends on have ended "+
		"(RabbitMQ keeps no record of a job once it is acknowledged); run the host on the embedded backend (the default) or memory")

// TaskSpec is one task of a workflow: a job with a name, the tasks it runs after, and
// what a dependency that did not succeed does to it.
type TaskSpec struct {
	Name string
	Job  jobspec.Spec
	// DependsOn names the tasks it runs after, each once.
	DependsOn []string
	// OnDependencyFailure is backend.OnFailureCancel (the default, empty) or
	// backend.OnFailureRun.
	OnDependencyFailure backend.OnFailure
}

// BatchSpec is a batch: its jobs and the callbacks that wait for all of them.
type BatchSpec struct {
	Jobs []jobspec.Spec
	// OnComplete runs once every job has ended, however; OnSuccess once every job has
	// succeeded, and is cancelled otherwise. Either may be nil.
	OnComplete, OnSuccess *jobspec.Spec
}

// groupStore is the backend's GroupStore, or the refusal where it has none.
func (in *Inspector) groupStore() (backend.GroupStore, error) {
	if in.groups == nil {
		return nil, errGroupsUnsupported
	}
	return in.groups, nil
}

// CreateWorkflow checks tasks and publishes them as one workflow, atomically: each task
// is held until every task it depends on has succeeded (with OnDependencyFailure run,
// until every one has ended). A name that is empty, too long,
// repeated or unknown, a cycle, or a task that fails the job's checks is an ErrInvalid
// error naming it, and nothing is stored. The record returned lists the tasks in the
// order they can run.
func (in *Inspector) CreateWorkflow(ctx context.Context, tasks []TaskSpec) (backend.GroupRecord, error) {
	if err := in.Refusal(); err != nil {
		return backend.GroupRecord{}, err
	}
	gs, err := in.groupStore()
	if err != nil {
		return backend.GroupRecord{}, err
	}
	if len(tasks) == 0 || len(tasks) > MaxGroupJobs {
		return backend.GroupRecord{}, errorf(ErrInvalid, "tasks: want 1 to %d tasks, got %d", MaxGroupJobs, len(tasks))
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		switch {
		case t.Name == "":
			return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d]: name is required", i)
		case len(t.Name) > MaxTaskName:
			return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d]: name of %d bytes passes the limit of %d bytes", i, len(t.Name), MaxTaskName)
		case !utf8.ValidString(t.Name):
			return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d]: name %q is not valid UTF-8", i, t.Name)
		}
		if j, dup := index[t.Name]; dup {
			return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d]: duplicate name %q (tasks[%d] has it too)", i, t.Name, j)
		}
		index[t.Name] = i
	}
	pubs := make([]backend.Publication, len(tasks))
	for i, t := range tasks {
		if t.OnDependencyFailure != "" && t.OnDependencyFailure != backend.OnFailureCancel && t.OnDependencyFailure != backend.OnFailureRun {
			return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d] (%s): on_dependency_failure %q: want cancel or run", i, t.Name, t.OnDependencyFailure)
		}
		seen := make(map[string]bool, len(t.DependsOn))
		for _, d := range t.DependsOn {
			if _, ok := index[d]; !ok {
				return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d] (%s): depends_on names an unknown task %q", i, t.Name, d)
			}
			if seen[d] {
				return backend.GroupRecord{}, errorf(ErrInvalid, "tasks[%d] (%s): depends_on names %q twice", i, t.Name, d)
			}
			seen[d] = true
		}
		pub, err := in.groupJob(t.Job, "workflow task")
		if err != nil {
			return backend.GroupRecord{}, fmt.Errorf("tasks[%d] (%s): %w", i, t.Name, err)
		}
		pubs[i] = pub
	}
	order, cycle := runOrder(tasks, index)
	if cycle != nil {
		return backend.GroupRecord{}, errorf(ErrInvalid, "tasks form a cycle: %s", strings.Join(cycle, " -> "))
	}
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupWorkflow, Members: make([]backend.GroupMember, 0, len(tasks))}
	deps := make([]backend.Dependent, 0, len(tasks))
	for _, i := range order {
		t := tasks[i]
		env := pubs[i].Envelope
		ids := make([]string, len(t.DependsOn))
		for k, d := range t.DependsOn {
			ids[k] = pubs[index[d]].Envelope.ID
		}
		deps = append(deps, backend.Dependent{Publication: pubs[i], Await: backend.Await{IDs: ids, OnFailure: t.OnDependencyFailure}})
		g.Members = append(g.Members, backend.GroupMember{Name: t.Name, ID: env.ID, Queue: env.Queue, DependsOn: t.DependsOn})
	}
	return in.publishGroup(ctx, gs, g, deps)
}

// runOrder returns the tasks' indexes in an order in which every task comes after those
// it depends on (Kahn's algorithm, ties in the order given), or, when there is none, a
// cycle, as task names, first and last the same.
func runOrder(tasks []TaskSpec, index map[string]int) (order []int, cycle []string) {
	waiting := make([]int, len(tasks)) // dependencies not yet ordered
	after := make([][]int, len(tasks)) // who depends on each task
	for i, t := range tasks {
		waiting[i] = len(t.DependsOn)
		for _, d := range t.DependsOn {
			after[index[d]] = append(after[index[d]], i)
		}
	}
	var ready []int
	for i := range tasks {
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		order = append(order, i)
		for _, j := range after[i] {
			if waiting[j]--; waiting[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	if len(order) == len(tasks) {
		return order, nil
	}
	// Every task left waits on another task left: walk dependencies from one until a
	// task repeats.
	pos := map[int]int{}
	var path []int
	for i := slices.IndexFunc(waiting, func(n int) bool { return n > 0 }); ; {
		if p, ok := pos[i]; ok {
			for _, k := range path[p:] {
				cycle = append(cycle, tasks[k].Name)
			}
			return nil, append(cycle, tasks[i].Name)
		}
		pos[i] = len(path)
		path = append(path, i)
		for _, d := range tasks[i].DependsOn {
			if waiting[index[d]] > 0 {
				i = index[d]
				break
			}
		}
	}
}

// CreateBatch checks b and publishes it as one batch, atomically: its jobs at once, and
// its callbacks held until every job has ended. The record's members are the jobs, in
// order, then the callbacks.
func (in *Inspector) CreateBatch(ctx context.Context, b BatchSpec) (backend.GroupRecord, error) {
	if err := in.Refusal(); err != nil {
		return backend.GroupRecord{}, err
	}
	gs, err := in.groupStore()
	if err != nil {
		return backend.GroupRecord{}, err
	}
	if len(b.Jobs) == 0 || len(b.Jobs) > MaxGroupJobs {
		return backend.GroupRecord{}, errorf(ErrInvalid, "jobs: want 1 to %d jobs, got %d", MaxGroupJobs, len(b.Jobs))
	}
	g := backend.GroupRecord{ID: backend.NewID(), Kind: backend.GroupBatch, Members: make([]backend.GroupMember, 0, len(b.Jobs)+2)}
	deps := make([]backend.Dependent, 0, len(b.Jobs)+2)
	ids := make([]string, len(b.Jobs))
	for i, spec := range b.Jobs {
		pub, err := in.groupJob(spec, "batch job")
		if err != nil {
			return backend.GroupRecord{}, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		ids[i] = pub.Envelope.ID
		deps = append(deps, backend.Dependent{Publication: pub})
		g.Members = append(g.Members, backend.GroupMember{ID: pub.Envelope.ID, Queue: pub.Envelope.Queue})
	}
	for _, cb := range []struct {
		role      string
		spec      *jobspec.Spec
		onFailure backend.OnFailure
	}{{backend.RoleOnComplete, b.OnComplete, backend.OnFailureRun}, {backend.RoleOnSuccess, b.OnSuccess, backend.OnFailureCancel}} {
		if cb.spec == nil {
			continue
		}
		pub, err := in.groupJob(*cb.spec, cb.role+" callback")
		if err != nil {
			return backend.GroupRecord{}, fmt.Errorf("%s: %w", cb.role, err)
		}
		deps = append(deps, backend.Dependent{Publication: pub, Await: backend.Await{IDs: ids, OnFailure: cb.onFailure}})
		g.Members = append(g.Members, backend.GroupMember{ID: pub.Envelope.ID, Queue: pub.Envelope.Queue, Role: cb.role})
	}
	return in.publishGroup(ctx, gs, g, deps)
}

// groupJob checks one job of a workflow or batch: the enqueue rules, and no unique key
// (a duplicate would leave its dependents waiting on a job that was never queued).
func (in *Inspector) groupJob(spec jobspec.Spec, what string) (backend.Publication, error) {
	if spec.UniqueKey != "" {
		return backend.Publication{}, errorf(ErrInvalid, "unique_key is not supported in a %s: a duplicate would queue nothing for the jobs that wait for it", what)
	}
	pub, err := in.check(spec)
	if err != nil {
		return backend.Publication{}, err
	}
	return pub.Publication, nil
}

// publishGroup publishes a checked group, with the host's memory told first (see
// publish) of the jobs that run at once.
func (in *Inspector) publishGroup(ctx context.Context, gs backend.GroupStore, g backend.GroupRecord, deps []backend.Dependent) (backend.GroupRecord, error) {
	for i, d := range deps {
		g.Members[i].State = backend.JobPending
		if len(d.Await.IDs) > 0 {
			g.Members[i].State = backend.JobWaiting
		} else {
			in.mem.Enqueued(d.Envelope, d.Delay > 0)
		}
	}
	g.State = backend.GroupRunning
	envs := make([]*backend.Envelope, len(deps))
	for i := range deps {
		envs[i] = &deps[i].Envelope
	}
	span := in.startSend(ctx, envs...)
	err := gs.PublishGroup(ctx, g, deps)
	endSpan(span, err)
	if err != nil {
		for _, d := range deps {
			in.mem.Forget(d.Envelope.ID)
		}
		err = fmt.Errorf("publishing %s %s of %d jobs: %w", g.Kind, g.ID, len(deps), err)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || in.StoreFailed() {
			return backend.GroupRecord{}, &PartialError{IDs: []string{g.ID}, Err: fmt.Errorf("%w; it may have been accepted (all of it or none): check with its id", err)}
		}
		return backend.GroupRecord{}, err
	}
	if in.Refusal() != nil {
		return backend.GroupRecord{}, &PartialError{IDs: []string{g.ID}, Err: drainedDuring(fmt.Sprintf("%s %s was", g.Kind, g.ID), "it")}
	}
	return g, nil
}

// Group returns the workflow or batch id, of kind: an error wrapping
// backend.ErrNotFound when there is none of that kind.
func (in *Inspector) Group(ctx context.Context, kind backend.GroupKind, id string) (backend.GroupRecord, error) {
	gs, err := in.groupStore()
	if err != nil {
		return backend.GroupRecord{}, err
	}
	g, err := gs.Group(ctx, id)
	if err == nil && g.Kind != kind {
		err = backend.ErrNotFound
	}
	if err != nil {
		return backend.GroupRecord{}, fmt.Errorf("%s %q: %w", kind, id, err)
	}
	return g, nil
}

// Groups lists the workflows or batches, newest first, a page at a time.
func (in *Inspector) Groups(ctx context.Context, kind backend.GroupKind, cursor string, limit int) (backend.GroupPage, error) {
	gs, err := in.groupStore()
	if err != nil {
		return backend.GroupPage{}, err
	}
	return gs.ListGroups(ctx, kind, cursor, limit)
}

// CancelGroup cancels the workflow or batch id: its members that have not run are
// cancelled, and those running on this host are stopped (Config.CancelRunning) and
// settle as cancelled. A group that has ended is an error wrapping backend.ErrJobState.
// It returns the group as it is afterwards.
func (in *Inspector) CancelGroup(ctx context.Context, kind backend.GroupKind, id string) (backend.GroupRecord, error) {
	if _, err := in.Group(ctx, kind, id); err != nil {
		return backend.GroupRecord{}, err
	}
	running, err := in.groups.CancelGroup(ctx, id, fmt.Sprintf("cancelled by an operator (%s %s)", kind, id))
	if err != nil {
		return backend.GroupRecord{}, fmt.Errorf("cancelling %s %q: %w", kind, id, err)
	}
	var errs []error
	for _, job := range running {
		if _, err := in.cancelRunning(ctx, job); err != nil && !errors.Is(err, backend.ErrJobState) && !errors.Is(err, worker.ErrNotRunning) {
			errs = append(errs, fmt.Errorf("job %s: %w", job, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return backend.GroupRecord{}, fmt.Errorf("cancelling %s %q: stopping its running jobs: %w", kind, id, err)
	}
	return in.Group(ctx, kind, id)
}

// WorkflowView is a workflow as the API and the dashboard show it.
type WorkflowView struct {
	ID         string                `json:"id"`
	State      backend.GroupState    `json:"state"`
	CreatedAt  time.Time             `json:"created_at,omitzero"`
	FinishedAt time.Time             `json:"finished_at,omitzero"`
	Tasks      []backend.GroupMember `json:"tasks"`
}

// ViewWorkflow is g's view.
func ViewWorkflow(g backend.GroupRecord) WorkflowView {
	return WorkflowView{ID: g.ID, State: g.State, CreatedAt: g.CreatedAt, FinishedAt: g.FinishedAt, Tasks: g.Members}
}

// BatchView is a batch as the API and the dashboard show it: its jobs counted by how
// they stand, the ids of those that did not succeed, and its callbacks' job ids by role.
type BatchView struct {
	ID         string             `json:"id"`
	State      backend.GroupState `json:"state"`
	CreatedAt  time.Time          `json:"created_at,omitzero"`
	FinishedAt time.Time          `json:"finished_at,omitzero"`
	Total      int                `json:"total"`
	// Pending counts the jobs that have not ended (waiting, running or retrying).
	Pending   int `json:"pending"`
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Cancelled int `json:"cancelled"`
	// Unknown counts the jobs that ended so long ago that their records were pruned:
	// how they ended is no longer known.
	Unknown int `json:"unknown,omitempty"`
	// Unsucceeded are the ids of the jobs that ended dead or cancelled.
	Unsucceeded []string          `json:"unsucceeded,omitempty"`
	Callbacks   map[string]string `json:"callbacks,omitempty"`
	// CallbackStates are the callbacks' states, by role.
	CallbackStates map[string]backend.JobState `json:"callback_states,omitempty"`
	// IDs are the jobs' ids, in the order they were given.
	IDs []string `json:"ids"`
}

// ViewBatch is g's view.
func ViewBatch(g backend.GroupRecord) BatchView {
	v := BatchView{ID: g.ID, State: g.State, CreatedAt: g.CreatedAt, FinishedAt: g.FinishedAt, IDs: []string{}}
	for _, m := range g.Members {
		if m.Role != "" {
			if v.Callbacks == nil {
				v.Callbacks, v.CallbackStates = map[string]string{}, map[string]backend.JobState{}
			}
			v.Callbacks[m.Role], v.CallbackStates[m.Role] = m.ID, m.State
			continue
		}
		v.Total++
		v.IDs = append(v.IDs, m.ID)
		switch m.State {
		case backend.JobSucceeded:
			v.Succeeded++
		case backend.JobDead:
			v.Dead++
			v.Unsucceeded = append(v.Unsucceeded, m.ID)
		case backend.JobCancelled:
			v.Cancelled++
			v.Unsucceeded = append(v.Unsucceeded, m.ID)
		case backend.JobUnfinished:
			v.Unknown++ // ended long ago: its record is pruned
		default:
			v.Pending++
		}
	}
	return v
}
