package api

import (
	"container/list"
	"strings"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// DefaultHistory is how many recent jobs a History remembers by default.
const DefaultHistory = 10_000

// JobState is the latest state of a job known to this host.
type JobState struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// State is pending, running, succeeded, retrying, deferred or dead.
	// From a backend's job records (pebble), the states are those of backend.JobState,
	// and a delayed job is "delayed".
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Output      string `json:"output,omitempty"`
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
	// started (Config.Attempts), the latest MaxAttemptsKept.
	Attempts []Attempt `json:"attempts,omitempty"`

	// rev is the History's update count when the entry last changed: an operator's
	// retry records its outcome only if nothing (the worker) changed the job since
	// the retry began. One count for the whole History, so that an entry dropped and
	// made again never repeats a rev.
	rev uint64
}

// ModuleRef names the module version that last ran a job.
type ModuleRef struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Role is "current" or "canary" when a rollout was running (job records only).
	Role string `json:"role,omitempty"`
}

// History remembers the latest state of the most recent jobs, up to a bound; the
// oldest are forgotten first. It is a worker.Observer. A nil *History remembers
// nothing: a backend with job records needs none.
type History struct {
	mu    sync.Mutex
	revs  uint64 // updates so far: the rev of the entry updated last
	max   int
	jobs  map[string]*list.Element // of *JobState
	order *list.List               // least recently updated at the front
}

// NewHistory returns a history of at most max jobs (DefaultHistory when max <= 0).
func NewHistory(max int) *History {
	if max <= 0 {
		max = DefaultHistory
	}
	return &History{max: max, jobs: make(map[string]*list.Element), order: list.New()}
}

// update applies f to the job's state, creating it if needed.
func (h *History) update(id string, f func(*JobState)) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.jobs[id]
	if !ok {
		el = h.order.PushBack(&JobState{ID: id})
		h.jobs[id] = el
		if h.order.Len() > h.max {
			oldest := h.order.Front()
			h.order.Remove(oldest)
			delete(h.jobs, oldest.Value.(*JobState).ID)
		}
	} else {
		h.order.MoveToBack(el)
	}
	st := el.Value.(*JobState)
	f(st)
	st.UpdatedAt = time.Now()
	h.revs++
	st.rev = h.revs
}

// Enqueued records a job published through this host.
func (h *History) Enqueued(env backend.Envelope, delayed bool) {
	h.update(env.ID, func(st *JobState) {
		st.Queue, st.State, st.Attempt, st.MaxAttempts, st.EnqueuedAt = env.Queue, "pending", max(env.Attempt, 1), env.MaxAttempts, env.EnqueuedAt
		if delayed {
			st.State = "deferred"
		}
	})
}

// Observe implements worker.Observer.
func (h *History) Observe(e worker.Event) {
	env := e.Job.Envelope
	h.update(env.ID, func(st *JobState) {
		st.Queue, st.Attempt, st.MaxAttempts = env.Queue, e.Job.Attempt, e.Job.MaxAttempts
		if st.EnqueuedAt.IsZero() {
			st.EnqueuedAt = env.EnqueuedAt
		}
		switch e.Kind {
		case worker.EventStarted:
			st.State = "running"
			return
		case worker.EventSettled:
			st.State = map[worker.Settle]string{worker.SettleAck: "succeeded", worker.SettleRetry: "retrying",
				worker.SettleDefer: "deferred", worker.SettleDeadLetter: "dead"}[e.Settle]
		case worker.EventSettleFailed, worker.EventAbandoned:
			st.State = "pending" // the backend delivers it again
		}
		st.Reason = e.Reason
		st.Output = strings.ToValidUTF8(string(e.Result.Output), "\uFFFD")
		st.Module = ModuleRef{Name: e.Result.Handler, Version: e.Result.Version}
		st.DurationMs = float64(e.Duration.Microseconds()) / 1000
	})
}

// Forget drops a job, such as one whose publish failed.
func (h *History) Forget(id string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.jobs[id]; ok {
		h.order.Remove(el)
		delete(h.jobs, id)
	}
}

// Get returns the job's latest state, if the history still holds it.
func (h *History) Get(id string) (JobState, bool) {
	if h == nil {
		return JobState{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.jobs[id]
	if !ok {
		return JobState{}, false
	}
	return *el.Value.(*JobState), true
}

// Len returns how many jobs the history holds.
func (h *History) Len() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.order.Len()
}
