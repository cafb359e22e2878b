package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// ErrUnavailable is returned by Jobs when the backend cannot do what is asked (list,
// cancel or delete a job on RabbitMQ): the error says why, and the API answers 501.
var ErrUnavailable = errors.New("not available on this backend")

// Jobs answers what the API and the dashboard ask about jobs: from the backend's job
// records where it keeps them (pebble), else from the host's History, and acts on one
// job through the backend's JobController.
type Jobs struct {
	Backend backend.Backend
	History *History
	// Attempts lists a job's attempts where the backend keeps no job records; nil
	// lists none.
	Attempts *Attempts
}

// Get returns the latest state of job id, or an error wrapping backend.ErrNotFound.
func (j Jobs) Get(ctx context.Context, id string) (JobState, error) {
	if rr, ok := j.Backend.(backend.JobRecordReader); ok {
		rec, err := rr.JobRecord(ctx, id)
		if errors.Is(err, backend.ErrNotFound) {
			return JobState{}, fmt.Errorf("job %q is not in the backend's job records (never enqueued, or pruned by retention): %w", id, backend.ErrNotFound)
		}
		if err != nil {
			return JobState{}, fmt.Errorf("reading the record of job %q: %w", id, err)
		}
		return jobState(rec), nil
	}
	st, ok := j.History.Get(id)
	if !ok {
		return JobState{}, fmt.Errorf("job %q is not in this host's recent history: %w", id, backend.ErrNotFound)
	}
	st.Attempts = j.Attempts.Of(id)
	return st, nil
}

// List returns a page of queue's jobs, newest first, and the cursor of the next page.
// On a backend without a JobLister it lists the host's History (recent jobs only).
func (j Jobs) List(ctx context.Context, queue string, f backend.JobFilter) ([]JobState, string, error) {
	if l, ok := j.Backend.(backend.JobLister); ok {
		page, err := l.ListJobs(ctx, queue, f)
		if err != nil {
			return nil, "", err
		}
		out := make([]JobState, len(page.Jobs))
		for i, rec := range page.Jobs {
			out[i] = jobState(rec)
		}
		return out, page.Next, nil
	}
	if j.History == nil {
		return nil, "", fmt.Errorf("listing the jobs of queue %s: this backend keeps no job records and the host no history: %w", queue, ErrUnavailable)
	}
	out, next := j.History.List(queue, f)
	return out, next, nil
}

// Action is what an operator does to one job.
type Action string

// The actions on one job.
const (
	ActionCancel Action = "cancel"
	ActionRetry  Action = "retry"
	ActionDelete Action = "delete"
)

// Do applies a to job id: an error wraps backend.ErrNotFound (no such job),
// backend.ErrJobState (its state does not allow it) or ErrUnavailable (the backend
// cannot).
func (j Jobs) Do(ctx context.Context, id string, a Action) error {
	c, ok := j.Backend.(backend.JobController)
	if !ok {
		return fmt.Errorf("%s job %q: the broker cannot find a queued message by id, so one job cannot be cancelled, retried or deleted (a dead letter can be replayed or purged): %w", a, id, ErrUnavailable)
	}
	before, knownBefore := j.History.Get(id)
	var err error
	switch a {
	case ActionCancel:
		err = c.CancelJob(ctx, id)
	case ActionRetry:
		err = c.RetryJobNow(ctx, id)
	case ActionDelete:
		err = c.DeleteJob(ctx, id)
	default:
		return fmt.Errorf("unknown action %q: want cancel, retry or delete", a)
	}
	if _, records := j.Backend.(backend.JobRecordReader); records {
		return err
	}
	// The backend keeps nothing of running and finished jobs: the history says what
	// they are, and a finished one's delete is the history's.
	st, known := j.History.Get(id)
	if errors.Is(err, backend.ErrNotFound) && known {
		switch {
		case a == ActionDelete && (st.State == "succeeded" || st.State == "cancelled"):
			j.History.Forget(id)
			return nil
		default:
			return fmt.Errorf("job %q of queue %s is %s: %w", id, st.Queue, st.State, backend.ErrJobState)
		}
	}
	if err == nil {
		switch a {
		case ActionCancel:
			// A cancelled job is out of the worker's hands: nothing can be newer.
			j.History.set(id, "cancelled", "cancelled by an operator")
		case ActionRetry:
			// A retried job may already have run, even settled, by now: what the
			// worker recorded meanwhile is newer than the retry's "pending".
			if knownBefore {
				j.History.setUnchanged(id, before.rev, "pending", "")
			}
		case ActionDelete:
			j.History.Forget(id)
		}
	}
	return err
}

// List returns queue's jobs in the history matching f, newest first by id.
func (h *History) List(queue string, f backend.JobFilter) ([]JobState, string) {
	if h == nil {
		return nil, ""
	}
	limit := f.Limit
	if limit <= 0 {
		limit = backend.DefaultJobPage
	}
	h.mu.Lock()
	var all []JobState
	for el := h.order.Front(); el != nil; el = el.Next() {
		st := el.Value.(*JobState)
		if st.Queue == queue && (f.State == "" || st.State == string(f.State)) && (f.Cursor == "" || st.ID < f.Cursor) {
			all = append(all, *st)
		}
	}
	h.mu.Unlock()
	slices.SortFunc(all, func(a, b JobState) int { return strings.Compare(b.ID, a.ID) })
	if len(all) > limit {
		return all[:limit], all[limit-1].ID
	}
	return all, ""
}

// set records an operator's change of a job's state, if the history holds the job.
func (h *History) set(id, state, reason string) { h.setUnchanged(id, 0, state, reason) }

// setUnchanged records an operator's change of a job's state, unless the job changed
// since the operator's action read it as rev (0: whatever changed).
func (h *History) setUnchanged(id string, rev uint64, state, reason string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.jobs[id]
	if !ok || rev != 0 && el.Value.(*JobState).rev != rev {
		return
	}
	h.order.MoveToBack(el)
	st := el.Value.(*JobState)
	st.State, st.Reason, st.UpdatedAt = state, reason, time.Now()
	h.revs++
	st.rev = h.revs
}

// ParseJobFilter reads state, cursor and limit from a query.
func ParseJobFilter(r *http.Request) (backend.JobFilter, error) {
	q := r.URL.Query()
	f := backend.JobFilter{State: backend.JobState(q.Get("state")), Cursor: q.Get("cursor")}
	switch f.State {
	case "", backend.JobPending, backend.JobDelayed, backend.JobRunning, backend.JobSucceeded, backend.JobRetrying,
		backend.JobDeferred, backend.JobDead, backend.JobCancelled:
	default:
		return f, badRequest("state %q: want pending, delayed, running, succeeded, retrying, deferred, dead or cancelled", f.State)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return f, badRequest("limit %q: want a number from 1 to 1000", l)
		}
		f.Limit = n
	}
	return f, nil
}

func (s *server) jobs() Jobs {
	return Jobs{Backend: s.cfg.Backend, History: s.cfg.History, Attempts: s.cfg.Attempts}
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if _, err := s.served(q); err != nil {
		fail(w, err)
		return
	}
	f, err := ParseJobFilter(r)
	if err != nil {
		fail(w, err)
		return
	}
	if id := r.URL.Query().Get("id"); id != "" { // a search by id
		st, err := s.jobs().Get(r.Context(), id)
		out := []JobState{}
		if err == nil && st.Queue == q {
			out = append(out, st)
		} else if err != nil && !errors.Is(err, backend.ErrNotFound) {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "next": ""})
		return
	}
	jobs, next, err := s.jobs().List(r.Context(), q, f)
	if err != nil {
		fail(w, err)
		return
	}
	if jobs == nil {
		jobs = []JobState{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "next": next})
}

func (s *server) jobAction(a Action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if a == ActionRetry {
			if err := s.accepting(); err != nil {
				fail(w, err)
				return
			}
		}
		if err := s.jobs().Do(r.Context(), id, a); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "done": string(a)})
	}
}

func (s *server) rates(w http.ResponseWriter, r *http.Request) {
	out := []RateSeries{}
	for _, m := range s.cfg.Registry.Modules() {
		if m.Status == "serving" {
			out = append(out, s.cfg.Rates.Series(m.Queue))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rates": out})
}
