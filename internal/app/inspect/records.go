package inspect

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of Records.
const (
	// DefaultRecords is how many recent jobs a Records remembers by default.
	DefaultRecords = 10_000
	// MaxAttemptsKept is how many attempts of one job a Records keeps, the latest.
	MaxAttemptsKept = 50
)

// How an attempt ended where no settle state says it: the host's memory keeps these
// in backend.AttemptRecord.State, and the attempt's settle shows them as they are.
const (
	attemptAbandoned    backend.JobState = "abandoned"
	attemptSettleFailed backend.JobState = "settle failed"
)

// settledStates is the state each settle leaves a job in, as job records name it; read
// the other way (settleOf), it names the settle of an attempt from its state.
var settledStates = map[worker.Outcome]backend.JobState{worker.Ack: backend.JobSucceeded,
	worker.Retry: backend.JobRetrying, worker.Defer: backend.JobDeferred, worker.DeadLetter: backend.JobDead,
	worker.Cancelled: backend.JobCancelled, worker.Wait: backend.JobWaiting}

// settleOf names the settle that left a job in state, as Attempt.Settle does; an
// attempt of the host's memory that no settle ended keeps its own name.
func settleOf(state backend.JobState) string {
	for settle, s := range settledStates {
		if s == state {
			return settle.String()
		}
	}
	return string(state)
}

// Records is this host's memory of the most recent jobs, up to a bound (the oldest are
// forgotten first), for a backend that keeps no job records (memory, RabbitMQ): the
// jobs published through this host and what the worker reported of each, its attempts
// included. It keeps them as backend.JobRecord values and reads them back through
// backend.JobRecordReader and backend.JobLister, so that the Inspector reads a job the
// same way whatever keeps it. It is a worker.Observer. A nil *Records remembers
// nothing: a backend with job records needs none.
type Records struct {
	mu    sync.Mutex
	revs  uint64 // updates so far: the rev of the entry updated last
	max   int
	jobs  map[string]*list.Element // of *entry
	order *list.List               // least recently updated at the front
}

// entry is one job of a Records.
type entry struct {
	rec backend.JobRecord
	// known is false once a publish that failed was forgotten: the job is unknown, but
	// the attempts this host saw it run stay, for when it is published again (a replay
	// that failed in one queue and succeeded in the next).
	known bool
	// rev is the Records' update count when the entry last changed: an operator's retry
	// records its outcome only if nothing (the worker) changed the job since the retry
	// began. One count for the whole Records, so that an entry dropped and made again
	// never repeats a rev.
	rev uint64
}

var (
	_ backend.JobRecordReader = (*Records)(nil)
	_ backend.JobLister       = (*Records)(nil)
	_ worker.Observer         = (*Records)(nil)
)

// NewRecords returns a memory of at most max jobs (DefaultRecords when max <= 0).
func NewRecords(max int) *Records {
	if max <= 0 {
		max = DefaultRecords
	}
	return &Records{max: max, jobs: make(map[string]*list.Element), order: list.New()}
}

// change applies f to the job's entry, under the lock, making the entry first when
// create says so (and the job is not there). When f reports a change, the entry is
// the most recently updated, with a new rev.
func (r *Records) change(id string, create bool, f func(*entry) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.jobs[id]
	if !ok && !create {
		return
	}
	if !ok {
		el = r.order.PushBack(&entry{rec: backend.JobRecord{ID: id}})
		r.jobs[id] = el
		if r.order.Len() > r.max {
			oldest := r.order.Front()
			r.order.Remove(oldest)
			delete(r.jobs, oldest.Value.(*entry).rec.ID)
		}
	}
	en := el.Value.(*entry)
	if !f(en) {
		return
	}
	r.order.MoveToBack(el)
	en.rec.UpdatedAt = time.Now()
	r.revs++
	en.rev = r.revs
}

// RecordsFor returns the host's memory of jobs that backend b needs: nil where b keeps
// job records of its own (backend.JobRecordReader, the pebble backend's, which answer
// after a restart too), else NewRecords(max). A nil *Records observes nothing.
func RecordsFor(b backend.Backend, max int) *Records {
	if _, own := b.(backend.JobRecordReader); own {
		return nil
	}
	return NewRecords(max)
}

// update applies f to the job's record, creating it if needed, and makes it known.
func (r *Records) update(id string, f func(*backend.JobRecord)) {
	r.change(id, true, func(en *entry) bool {
		en.known = true
		f(&en.rec)
		return true
	})
}

// Enqueued records a job published through this host; a delayed one is "deferred"
// until it runs.
func (r *Records) Enqueued(env backend.Envelope, delayed bool) {
	r.update(env.ID, func(rec *backend.JobRecord) {
		rec.Queue, rec.State, rec.Attempt, rec.MaxAttempts, rec.CreatedAt = env.Queue, backend.JobPending, max(env.Attempt, 1), env.MaxAttempts, env.EnqueuedAt
		if delayed {
			rec.State = backend.JobDeferred
		}
	})
}

// Observe implements worker.Observer: the job's state, and an attempt for each end of
// a run.
func (r *Records) Observe(e worker.Event) {
	if r == nil || e.Job == nil {
		return
	}
	env := e.Job.Envelope
	now := time.Now()
	r.update(env.ID, func(rec *backend.JobRecord) {
		rec.Queue, rec.Attempt, rec.MaxAttempts = env.Queue, e.Job.Attempt, e.Job.MaxAttempts
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = env.EnqueuedAt
		}
		if e.Kind == worker.EventStarted {
			rec.State = backend.JobRunning
			return
		}
		at := backend.AttemptRecord{Attempt: e.Job.Attempt, State: backend.JobState(e.Settle.String()), Reason: e.Reason,
			Module: e.Result.Handler, Version: e.Result.Version, StartedAt: now.Add(-e.Duration), FinishedAt: now,
			Calls: worker.CallRecords(e.Result.Calls), CallsDropped: e.Result.CallsDropped, TraceID: e.Job.TraceID()}
		if n := len(at.Calls) - backend.MaxRecordCalls; n > 0 {
			at.Calls, at.CallsDropped = at.Calls[:backend.MaxRecordCalls], at.CallsDropped+n
		}
		switch e.Kind {
		case worker.EventSettled:
			if s, ok := settledStates[e.Settle]; ok {
				rec.State, at.State = s, s
			} else {
				rec.State = ""
			}
		case worker.EventSettleFailed, worker.EventAbandoned:
			rec.State = backend.JobPending // the backend delivers it again
			at.State = attemptAbandoned
			if e.Kind == worker.EventSettleFailed {
				at.State = attemptSettleFailed
				if e.Err != nil {
					at.Reason = e.Err.Error()
				}
			}
		}
		rec.Reason = e.Reason
		rec.Output = []byte(strings.ToValidUTF8(string(e.Result.Output), "\uFFFD"))
		rec.Module, rec.ModuleVersion = e.Result.Handler, e.Result.Version
		rec.StartedAt, rec.FinishedAt = at.StartedAt, at.FinishedAt
		rec.Attempts = append(rec.Attempts, at)
		if len(rec.Attempts) > MaxAttemptsKept {
			rec.Attempts = slices.Clone(rec.Attempts[len(rec.Attempts)-MaxAttemptsKept:])
		}
	})
}

// Forget drops a job, such as one whose publish failed. The attempts this host saw it
// run stay, hidden, until the job is known again or the bound pushes them out.
func (r *Records) Forget(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.jobs[id]
	if !ok {
		return
	}
	en := el.Value.(*entry)
	if len(en.rec.Attempts) == 0 {
		r.order.Remove(el)
		delete(r.jobs, id)
		return
	}
	en.known, en.rec = false, backend.JobRecord{ID: id, Attempts: en.rec.Attempts}
}

// restore puts back the record rec that the job had before an action that failed
// (a replay into a queue that does not hold it), as the job's latest.
func (r *Records) restore(id string, rec backend.JobRecord) {
	r.change(id, true, func(en *entry) bool {
		en.known, en.rec = true, rec
		return true
	})
}

// get returns the job's entry, if the memory holds the job.
func (r *Records) get(id string) (entry, bool) {
	if r == nil {
		return entry{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.jobs[id]
	if !ok || !el.Value.(*entry).known {
		return entry{}, false
	}
	en := *el.Value.(*entry)
	en.rec.Attempts = slices.Clone(en.rec.Attempts)
	return en, true
}

// JobRecord implements backend.JobRecordReader: the job's latest record, or an error
// wrapping backend.ErrNotFound when the memory does not hold it.
func (r *Records) JobRecord(_ context.Context, id string) (backend.JobRecord, error) {
	en, ok := r.get(id)
	if !ok {
		return backend.JobRecord{}, fmt.Errorf("job %q is not in this host's recent history: %w", id, backend.ErrNotFound)
	}
	return en.rec, nil
}

// ListJobs implements backend.JobLister over the jobs the memory holds: queue's jobs
// matching f, newest first by id. It reads no backend, so any queue name is fine.
func (r *Records) ListJobs(_ context.Context, queue string, f backend.JobFilter) (backend.JobPage, error) {
	if r == nil {
		return backend.JobPage{}, nil
	}
	limit := f.Limit
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	r.mu.Lock()
	var all []backend.JobRecord
	for el := r.order.Front(); el != nil; el = el.Next() {
		en := el.Value.(*entry)
		if rec := en.rec; en.known && rec.Queue == queue && (f.State == "" || rec.State == f.State) && (f.Cursor == "" || rec.ID < f.Cursor) {
			rec.Attempts = slices.Clone(rec.Attempts)
			all = append(all, rec)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(all, func(a, b backend.JobRecord) int { return strings.Compare(b.ID, a.ID) })
	if len(all) > limit {
		return backend.JobPage{Jobs: all[:limit], Next: all[limit-1].ID}, nil
	}
	return backend.JobPage{Jobs: all}, nil
}

// setUnchanged records an operator's change of a job's state, if the memory holds the
// job, unless the job changed since the operator's action read it as rev (0: whatever
// changed).
func (r *Records) setUnchanged(id string, rev uint64, state backend.JobState, reason string) {
	r.change(id, false, func(en *entry) bool {
		if !en.known || rev != 0 && en.rev != rev {
			return false
		}
		en.rec.State, en.rec.Reason = state, reason
		return true
	})
}

// Len returns how many jobs the memory holds.
func (r *Records) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for el := r.order.Front(); el != nil; el = el.Next() {
		if el.Value.(*entry).known {
			n++
		}
	}
	return n
}
