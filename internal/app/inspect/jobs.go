package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// JobView is a job as GET /v1/jobs/{id} and the dashboard show it: its latest state
// and what its runs left, from the backend's job records (pebble) or from this host's memory (Records).
type JobView struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// State is the job's state: from this host's memory (Records) pending, running,
	// succeeded, retrying, deferred, dead or cancelled; from a backend's job records
	// (pebble), any.
	State       backend.JobState `json:"state"`
	Attempt     int              `json:"attempt"`
	MaxAttempts int              `json:"max_attempts,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	Output      string           `json:"output,omitempty"`
	// OutputTruncated says the backend kept only the start of the output.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Logs are the guest's log lines of the last run, up to the backend's cap
	// (LogsTruncated says lines were dropped); only job records keep them.
	Logs          []string  `json:"logs,omitempty"`
	LogsTruncated bool      `json:"logs_truncated,omitempty"`
	Module        ModuleRef `json:"module"`
	EnqueuedAt    time.Time `json:"enqueued_at,omitzero"`
	UpdatedAt     time.Time `json:"updated_at"`
	// StartedAt and FinishedAt bound the last run (job records only).
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	DurationMs float64   `json:"duration_ms,omitempty"`
	// Children are the ids of the jobs published with the job's ack (job records only).
	Children []string `json:"children,omitempty"`
	// Attempts are the job's settled attempts, oldest first: from job records, the
	// latest backend.MaxRecordAttempts; elsewhere those this host ran since it
	// started (Config.Records), the latest MaxAttemptsKept.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// ModuleRef names the module version that last ran a job.
type ModuleRef struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Role is "current" or "canary" when a rollout was running (job records only).
	Role string `json:"role,omitempty"`
}

// Attempt is one run of a job.
type Attempt struct {
	Attempt int    `json:"attempt"`
	Settle  string `json:"settle"` // ack, retry, defer, dead_letter, cancelled, wait; or "abandoned", "settle failed"
	Reason  string `json:"reason,omitempty"`
	// Module and Version name the handler that ran this attempt; Role is "current" or
	// "canary" when a rollout was running (job records only).
	Module     string        `json:"module,omitempty"`
	Version    string        `json:"version,omitempty"`
	Role       string        `json:"role,omitempty"`
	StartedAt  time.Time     `json:"started_at,omitzero"`
	FinishedAt time.Time     `json:"finished_at"`
	Duration   time.Duration `json:"duration_ns"`
	// Calls are the calls the attempt made to other services (a module's outbound
	// HTTP requests), the first backend.MaxRecordCalls; CallsDropped counts the rest.
	Calls        []backend.CallRecord `json:"calls,omitempty"`
	CallsDropped int                  `json:"calls_dropped,omitempty"`
	// TraceID is the trace of the attempt's process span, when the host traced it.
	TraceID string `json:"trace_id,omitempty"`
}

// view is a job record as the operator sees it. From the host's memory (hostMemory)
// the times of a run are left out, as they always were there: its durations say it.
func view(rec backend.JobRecord, hostMemory bool) JobView {
	st := JobView{ID: rec.ID, Queue: rec.Queue, State: rec.State, Attempt: rec.Attempt, MaxAttempts: rec.MaxAttempts,
		Reason: rec.Reason, Output: strings.ToValidUTF8(string(rec.Output), "\uFFFD"), OutputTruncated: rec.OutputTruncated,
		Logs: rec.Logs, LogsTruncated: rec.LogsTruncated, Module: ModuleRef{Name: rec.Module, Version: rec.ModuleVersion, Role: rec.ModuleRole},
		EnqueuedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt, Children: rec.Children}
	if !rec.StartedAt.IsZero() && rec.FinishedAt.After(rec.StartedAt) {
		st.DurationMs = float64(rec.FinishedAt.Sub(rec.StartedAt).Microseconds()) / 1000
	}
	if len(rec.Attempts) > 0 {
		st.Attempts = make([]Attempt, len(rec.Attempts))
		for i, a := range rec.Attempts {
			at := Attempt{Attempt: a.Attempt, Settle: settleOf(a.State), Reason: a.Reason, Module: a.Module,
				Version: a.Version, Role: a.Role, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Calls: a.Calls, CallsDropped: a.CallsDropped, TraceID: a.TraceID}
			if !a.StartedAt.IsZero() && a.FinishedAt.After(a.StartedAt) {
				at.Duration = a.FinishedAt.Sub(a.StartedAt)
			}
			if hostMemory {
				at.StartedAt = time.Time{}
			}
			st.Attempts[i] = at
		}
	}
	if hostMemory {
		st.StartedAt, st.FinishedAt = time.Time{}, time.Time{}
	}
	return st
}

// Job returns the latest state of job id as the operator sees it (JobRecord, viewed),
// or an error wrapping backend.ErrNotFound.
func (in *Inspector) Job(ctx context.Context, id string) (JobView, error) {
	rec, err := in.JobRecord(ctx, id)
	if err != nil {
		return JobView{}, err
	}
	return view(rec, !in.own), nil
}

// JobRecord returns job id's record: the backend's own where it keeps job records
// (pebble), else this host's memory of it (Records). An error wraps
// backend.ErrNotFound when neither holds it.
func (in *Inspector) JobRecord(ctx context.Context, id string) (backend.JobRecord, error) {
	if in.records == nil {
		return backend.JobRecord{}, fmt.Errorf("job %q is not in this host's recent history: %w", id, backend.ErrNotFound)
	}
	rec, err := in.records.JobRecord(ctx, id)
	if in.own && errors.Is(err, backend.ErrNotFound) {
		return backend.JobRecord{}, fmt.Errorf("job %q is not in the backend's job records (never enqueued, or pruned by retention): %w", id, backend.ErrNotFound)
	}
	if in.own && err != nil {
		return backend.JobRecord{}, fmt.Errorf("reading the record of job %q: %w", id, err)
	}
	return rec, err
}

// Jobs returns a page of queue's jobs, newest first, as the operator sees them
// (JobRecords, viewed), and the cursor of the next page.
func (in *Inspector) Jobs(ctx context.Context, queue string, f backend.JobFilter) ([]JobView, string, error) {
	page, err := in.JobRecords(ctx, queue, f)
	if err != nil {
		return nil, "", err
	}
	out := make([]JobView, len(page.Jobs))
	for i, rec := range page.Jobs {
		out[i] = view(rec, !in.own)
		if !in.own {
			out[i].Attempts = nil // the host's memory has always listed jobs without them
		}
	}
	return out, page.Next, nil
}

// JobRecords returns a page of queue's job records, newest first. On a backend
// without a JobLister it lists this host's memory (recent jobs only).
func (in *Inspector) JobRecords(ctx context.Context, queue string, f backend.JobFilter) (backend.JobPage, error) {
	if in.lister == nil {
		return backend.JobPage{}, fmt.Errorf("listing the jobs of queue %s: this backend keeps no job records and the host no history: %w", queue, ErrUnavailable)
	}
	return in.lister.ListJobs(ctx, queue, f)
}

// FindJob is a search of queue's jobs by id: the job, when it is of queue, else none.
func (in *Inspector) FindJob(ctx context.Context, queue, id string) ([]JobView, error) {
	st, err := in.Job(ctx, id)
	out := []JobView{}
	if err == nil && st.Queue == queue {
		out = append(out, st)
	} else if err != nil && !errors.Is(err, backend.ErrNotFound) {
		return nil, err
	}
	return out, nil
}

// Action is what an operator does to one job.
type Action string

// The actions on one job.
const (
	ActionCancel Action = "cancel"
	ActionRetry  Action = "retry"
	ActionDelete Action = "delete"
)

// Act applies a to job id: an error wraps backend.ErrNotFound (no such job),
// backend.ErrJobState (its state does not allow it; for a cancel of a running job,
// its settle won), ErrUnavailable (the backend cannot), ErrInvalid (no such action)
// or, for a retry, ErrDraining. A cancel of a job running on this host stops it and
// returns once it settled as cancelled (Config.CancelRunning), on every backend.
func (in *Inspector) Act(ctx context.Context, id string, a Action) error {
	switch a {
	case ActionCancel, ActionRetry, ActionDelete:
	default:
		return errorf(ErrInvalid, "unknown action %q: want cancel, retry or delete", a)
	}
	if a == ActionRetry {
		if err := in.Refusal(); err != nil {
			return err
		}
	}
	c := in.control
	if c == nil && a == ActionCancel {
		if running, err := in.cancelRunning(ctx, id); running {
			return err
		}
	}
	if c == nil {
		return fmt.Errorf("%s job %q: the broker cannot find a queued message by id, so one job cannot be cancelled, retried or deleted (a dead letter can be replayed or purged): %w", a, id, ErrUnavailable)
	}
	before, knownBefore := in.mem.get(id)
	var err error
	switch a {
	case ActionCancel:
		err = c.CancelJob(ctx, id)
		if errors.Is(err, backend.ErrJobState) || errors.Is(err, backend.ErrNotFound) {
			// Not waiting: running here, perhaps. The worker's settle writes what
			// became of it, in the backend's record or the host's memory.
			if running, cerr := in.cancelRunning(ctx, id); running {
				return cerr
			}
		}
	case ActionRetry:
		err = c.RetryJobNow(in.replayContext(ctx), id) // a dead job's retry is a replay
	case ActionDelete:
		err = c.DeleteJob(ctx, id)
	}
	if in.own {
		return err
	}
	// The backend keeps nothing of running and finished jobs: the host's memory says
	// what they are, and a finished one's delete is the memory's.
	now, known := in.mem.get(id)
	if errors.Is(err, backend.ErrNotFound) && known {
		switch st := now.rec.State; {
		case a == ActionDelete && (st == backend.JobSucceeded || st == backend.JobCancelled):
			in.mem.Forget(id)
			return nil
		default:
			return fmt.Errorf("job %q of queue %s is %s: %w", id, now.rec.Queue, st, backend.ErrJobState)
		}
	}
	if err == nil {
		switch a {
		case ActionCancel:
			// A cancelled job is out of the worker's hands: nothing can be newer.
			in.mem.setUnchanged(id, 0, backend.JobCancelled, "cancelled by an operator")
		case ActionRetry:
			// A retried job may already have run, even settled, by now: what the
			// worker recorded meanwhile is newer than the retry's "pending".
			if knownBefore {
				in.mem.setUnchanged(id, before.rev, backend.JobPending, "")
			}
		case ActionDelete:
			in.mem.Forget(id)
		}
	}
	return err
}

// cancelRunning cancels the job id where it runs on this host (Config.CancelRunning),
// for at most CancelRunningWait. running is false when it does not run here (or
// nothing can cancel it): the caller answers as for a job not waiting. A settle that
// won (the handler had returned) is an error wrapping backend.ErrJobState that says
// which settle.
func (in *Inspector) cancelRunning(ctx context.Context, id string) (running bool, err error) {
	if in.cfg.CancelRunning == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, CancelRunningWait)
	defer cancel()
	err = in.cfg.CancelRunning(ctx, id)
	switch {
	case errors.Is(err, worker.ErrNotRunning):
		return false, nil
	case errors.Is(err, worker.ErrSettling):
		return true, &kindError{msg: err.Error(), kinds: []error{backend.ErrJobState, err}}
	}
	return true, err
}

// ParseJobFilter reads state, cursor and limit from a query.
func ParseJobFilter(q url.Values) (backend.JobFilter, error) {
	f := backend.JobFilter{State: backend.JobState(q.Get("state")), Cursor: q.Get("cursor")}
	switch f.State {
	case "", backend.JobPending, backend.JobDelayed, backend.JobRunning, backend.JobSucceeded, backend.JobRetrying,
		backend.JobDeferred, backend.JobDead, backend.JobCancelled:
	default:
		return f, errorf(ErrInvalid, "state %q: want pending, delayed, running, succeeded, retrying, deferred, dead or cancelled", f.State)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return f, errorf(ErrInvalid, "limit %q: want a number from 1 to 1000", l)
		}
		f.Limit = n
	}
	return f, nil
}

// Payload returns the payload and headers of job st where the backend can give them:
// while it holds the job (waiting or dead, backend.JobEnvelopeReader), or from a
// broker's dead letters, read up to maxDead of them (a broker lists its dead letters
// by taking and putting them back). ok is false where neither can.
func (in *Inspector) Payload(ctx context.Context, st JobView, maxDead int) (payload []byte, headers map[string]string, ok bool) {
	if in.envelopes != nil {
		env, err := in.envelopes.JobEnvelope(ctx, st.ID)
		if err != nil {
			return nil, nil, false
		}
		return env.Payload, env.Headers, true
	}
	if in.dead == nil || st.State != backend.JobDead {
		return nil, nil, false
	}
	dead, err := in.dead.DeadLetters(ctx, st.Queue, maxDead)
	if err != nil {
		return nil, nil, false
	}
	for _, d := range dead {
		if d.Envelope.ID == st.ID {
			payload, headers, ok = d.Envelope.Payload, d.Envelope.Headers, true
		}
	}
	return payload, headers, ok
}
