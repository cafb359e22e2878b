package server

import (
	"context"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

// CancelWait is how long Cancel waits for a running job to stop and settle.
const CancelWait = 10 * time.Second

// The wait above is the inspector's, written out so that godoc shows its value: one
// that differs from its source does not compile (a negative constant overflows uint).
const _ = uint(CancelWait-inspect.CancelRunningWait) + uint(inspect.CancelRunningWait-CancelWait)

// ErrConflict is an operator's action that the module's state does not allow now: a
// Promote without a canary under way, a Rollback to a version that cannot serve.
var ErrConflict = inspect.ErrConflict

// Inspector is the operator's view of the host, the one behind the HTTP API, the
// dashboard and the CLI, so that a program asking it is answered as they are: queues
// and their counts, jobs (get, list, cancel, retry, delete), dead letters (list,
// replay, purge), modules (list, history, promote, rollback) and schedules. Its
// methods are safe for concurrent use.
//
// What it can tell depends on the backend. Job records: pebble keeps its own, across
// restarts; on memory and RabbitMQ the host remembers the jobs it ran or took since
// it started, the latest Config.History of them. A single job can be cancelled,
// retried or deleted where the backend finds one by id (memory, pebble), not on
// RabbitMQ, except that a job running on this host can be cancelled on all three; dead
// letters are listed, replayed and purged on all three. What the backend cannot do is
// an error wrapping ErrUnavailable.
type Inspector struct {
	in *inspect.Inspector
}

// Queue is a served queue with its counts. A count of -1 is one the backend cannot
// tell (RabbitMQ does not count unacked, delayed or deferred messages). When reading
// the counts failed they are absent (QueueStats is nil) and Error says why.
type Queue struct {
	// Name is the queue, Module the module that serves it.
	Name, Module string
	// Running counts the queue's jobs this host runs now.
	Running int
	*backend.QueueStats
	Error string
}

// Queues lists every served queue with its counts; a count that fails is logged.
func (i *Inspector) Queues(ctx context.Context) []Queue {
	qs := i.in.Queues(ctx)
	out := make([]Queue, len(qs))
	for n, q := range qs {
		out[n] = Queue(q)
	}
	return out
}

// Stats returns queue's counts, or an error wrapping ErrUnavailable where the backend
// cannot count.
func (i *Inspector) Stats(ctx context.Context, queue string) (backend.QueueStats, error) {
	return i.in.Stats(ctx, queue)
}

// Job returns job id's record: its state, attempts and what its last run left. An
// error wraps backend.ErrNotFound when the host knows no such job (see Inspector for
// what it knows on each backend).
func (i *Inspector) Job(ctx context.Context, id string) (backend.JobRecord, error) {
	return i.in.JobRecord(ctx, id)
}

// Jobs returns a page of queue's jobs, newest first, that match f; the page's Next
// continues the listing (f.Cursor).
func (i *Inspector) Jobs(ctx context.Context, queue string, f backend.JobFilter) (backend.JobPage, error) {
	return i.in.JobRecords(ctx, queue, f)
}

// Cancel cancels job id. A waiting job (pending, delayed, deferred or retrying) never
// runs. A job running on this host is stopped: its handler is interrupted and the job
// ends cancelled, never retried, what it staged dropped; Cancel returns once it has
// settled so, waiting up to CancelWait (a handler that does not stop by then makes it fail
// with the deadline; it ends cancelled when it returns, unless that settle fails or the
// drain abandons it, and then it is delivered again). This works on every
// backend, RabbitMQ too. An error wraps backend.ErrNotFound, backend.ErrJobState (a
// job finished, or running and already settling: its settle wins, and the error says
// which) or ErrUnavailable (RabbitMQ, for a job that waits).
func (i *Inspector) Cancel(ctx context.Context, id string) error {
	return i.in.Act(ctx, id, inspect.ActionCancel)
}

// Retry makes job id, waiting or dead-lettered, run now. Its errors are Cancel's, and
// ErrDraining while the host takes no new jobs.
func (i *Inspector) Retry(ctx context.Context, id string) error {
	return i.in.Act(ctx, id, inspect.ActionRetry)
}

// Delete removes job id, not running, and its record. Its errors are Cancel's.
func (i *Inspector) Delete(ctx context.Context, id string) error {
	return i.in.Act(ctx, id, inspect.ActionDelete)
}

// DeadLetters lists up to limit of queue's dead letters (every one for 0), served or
// not: a queue no module serves any more may still hold some.
func (i *Inspector) DeadLetters(ctx context.Context, queue string, limit int) ([]backend.DeadLetter, error) {
	return i.in.DeadLetterList(ctx, queue, limit)
}

// ReplayDeadLetter puts dead letter id back in queue as a fresh job (attempt 1) and
// returns the queue: the one given, which must be served, or for "" the first served
// queue that holds it. An error wraps backend.ErrNotFound (no queue holds it),
// backend.ErrUnknownQueue (queue is not served) or ErrDraining.
func (i *Inspector) ReplayDeadLetter(ctx context.Context, id, queue string) (string, error) {
	return i.in.ReplayDeadLetter(ctx, id, queue)
}

// ReplayAll replays every dead letter of the served queue and returns how many.
func (i *Inspector) ReplayAll(ctx context.Context, queue string) (int, error) {
	return i.in.ReplayAll(ctx, queue)
}

// PurgeDeadLetters drops every dead letter of the served queue and returns how many.
func (i *Inspector) PurgeDeadLetters(ctx context.Context, queue string) (int, error) {
	return i.in.PurgeDeadLetters(ctx, queue)
}

// Modules returns every module of the modules directory with its status: serving,
// failed or under a canary.
func (i *Inspector) Modules() []host.ModuleStatus { return i.in.Modules() }

// ModuleHistory returns the versions of module name kept for a rollback, newest
// first. An error wraps host.ErrUnknownModule.
func (i *Inspector) ModuleHistory(name string) ([]host.HistoryEntry, error) {
	return i.in.ModuleHistory(name)
}

// Promote ends module name's canary now, promoting the new version. An error wraps
// host.ErrUnknownModule, ErrConflict (no canary under way) or ctx's error (nothing
// changed).
func (i *Inspector) Promote(ctx context.Context, name string) (host.Verdict, error) {
	return i.in.Promote(ctx, name)
}

// Rollback pins module name to version to (in full, or a unique prefix of 6 or more
// hex digits; "" ends the canary under way, else goes back one version). Its errors
// are Promote's, and host.ErrUnknownVersion.
func (i *Inspector) Rollback(ctx context.Context, name, to string) (host.Pin, error) {
	return i.in.Rollback(ctx, name, to)
}

// Schedule is one of the modules' periodic schedules as this host knows it.
type Schedule struct {
	// Name names it, "module/name"; Module declares it and its jobs go to Queue.
	Name, Module, Queue string
	// Cron, read in Timezone, says when it fires; Overlap is "skip" or "allow"; CatchUp
	// fires once at start for the newest tick missed (see host.Schedule).
	Cron, Timezone, Overlap string
	CatchUp                 bool
	// Next is the next tick; Last the last fired tick this host knows of, and LastID
	// its job's id. A host that does not fire (a follower on RabbitMQ) knows only what
	// it fired itself.
	Next, Last time.Time
	LastID     string
	// Firing says whether this host fires the schedules now: of several hosts on one
	// backend, one does.
	Firing bool
}

// Schedules lists the modules' schedules, sorted by name; never nil.
func (i *Inspector) Schedules() []Schedule {
	st := i.in.Schedules()
	out := make([]Schedule, len(st))
	for n, s := range st {
		out[n] = Schedule(s)
	}
	return out
}
