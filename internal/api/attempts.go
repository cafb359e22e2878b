package api

import (
	"container/list"
	"sync"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of Attempts.
const (
	// DefaultAttemptJobs is how many recent jobs an Attempts remembers.
	DefaultAttemptJobs = 10_000
	// MaxAttemptsKept is how many attempts of one job are kept, the latest.
	MaxAttemptsKept = 50
)

// Attempt is one run of a job as this host saw it.
type Attempt struct {
	Attempt int    `json:"attempt"`
	Settle  string `json:"settle"` // ack, retry, defer, dead_letter; or "abandoned", "settle failed"
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
}

// settleOf names the settle that left a job in state, as Attempt.Settle does.
func settleOf(state backend.JobState) string {
	switch state {
	case backend.JobSucceeded:
		return "ack"
	case backend.JobRetrying:
		return "retry"
	case backend.JobDeferred:
		return "defer"
	case backend.JobDead:
		return "dead_letter"
	}
	return string(state)
}

// recordAttempts are the attempts a job record keeps, as Attempts lists them.
func recordAttempts(rec backend.JobRecord) []Attempt {
	if len(rec.Attempts) == 0 {
		return nil
	}
	out := make([]Attempt, len(rec.Attempts))
	for i, a := range rec.Attempts {
		out[i] = Attempt{Attempt: a.Attempt, Settle: settleOf(a.State), Reason: a.Reason, Module: a.Module,
			Version: a.Version, Role: a.Role, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Calls: a.Calls, CallsDropped: a.CallsDropped}
		if !a.StartedAt.IsZero() && a.FinishedAt.After(a.StartedAt) {
			out[i].Duration = a.FinishedAt.Sub(a.StartedAt)
		}
	}
	return out
}

// Attempts remembers each recent job's attempts with their outcomes, reasons and the
// module version that ran each, as the worker reports them: what the dashboard's job
// page lists where the backend keeps no job records (RabbitMQ, memory). It is this
// host's memory since it started, bounded to the most recent jobs; a backend's job
// records (pebble) keep each job's attempts themselves, across restarts. A nil *Attempts remembers nothing.
type Attempts struct {
	mu    sync.Mutex
	max   int
	jobs  map[string]*list.Element // of *attemptLog
	order *list.List
}

type attemptLog struct {
	id       string
	attempts []Attempt
}

// NewAttempts remembers the attempts of up to max jobs (DefaultAttemptJobs when <= 0).
func NewAttempts(max int) *Attempts {
	if max <= 0 {
		max = DefaultAttemptJobs
	}
	return &Attempts{max: max, jobs: map[string]*list.Element{}, order: list.New()}
}

// Observe implements worker.Observer.
func (a *Attempts) Observe(e worker.Event) {
	if a == nil || e.Job == nil || e.Kind == worker.EventStarted {
		return
	}
	at := Attempt{Attempt: e.Job.Attempt, Settle: e.Settle.String(), Reason: e.Reason, Module: e.Result.Handler,
		Version: e.Result.Version, FinishedAt: time.Now(), Duration: e.Duration,
		Calls: worker.CallRecords(e.Result.Calls), CallsDropped: e.Result.CallsDropped}
	if n := len(at.Calls) - backend.MaxRecordCalls; n > 0 {
		at.Calls, at.CallsDropped = at.Calls[:backend.MaxRecordCalls], at.CallsDropped+n
	}
	switch e.Kind {
	case worker.EventAbandoned:
		at.Settle = "abandoned"
	case worker.EventSettleFailed:
		at.Settle = "settle failed"
		if e.Err != nil {
			at.Reason = e.Err.Error()
		}
	}
	id := e.Job.Envelope.ID
	a.mu.Lock()
	defer a.mu.Unlock()
	el, ok := a.jobs[id]
	if !ok {
		el = a.order.PushBack(&attemptLog{id: id})
		a.jobs[id] = el
		if a.order.Len() > a.max {
			oldest := a.order.Front()
			a.order.Remove(oldest)
			delete(a.jobs, oldest.Value.(*attemptLog).id)
		}
	} else {
		a.order.MoveToBack(el)
	}
	l := el.Value.(*attemptLog)
	l.attempts = append(l.attempts, at)
	if len(l.attempts) > MaxAttemptsKept {
		l.attempts = l.attempts[len(l.attempts)-MaxAttemptsKept:]
	}
}

// Of returns the attempts of job id this host saw, oldest first.
func (a *Attempts) Of(id string) []Attempt {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.jobs[id]; ok {
		return append([]Attempt(nil), el.Value.(*attemptLog).attempts...)
	}
	return nil
}
