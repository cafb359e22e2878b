package host

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/worker"
)

// Handler is the worker.Handler of a queue served by a module. Swap replaces the module
// while jobs run: a job runs to its end on the version it started on, and the old
// version is closed when its last job ends.
//
// While a canary runs (a Registry starts one), the first attempts of the jobs whose id
// falls in its share run on the canary instead; retries run on the current version.
type Handler struct {
	cur atomic.Pointer[Module]
	can atomic.Pointer[canary] // nil when no canary runs
	log *slog.Logger
}

// NewHandler returns a handler that runs jobs on m, logging what guests log on log
// (nil discards it) tagged with the job, queue, module, version and attempt.
func NewHandler(m *Module, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{log: log}
	h.cur.Store(m)
	return h
}

// Module returns the module that new jobs run on.
func (h *Handler) Module() *Module { return h.cur.Load() }

// Swap makes m the module new jobs run on and retires the previous one, which is
// closed once its running jobs end. It returns the previous module.
func (h *Handler) Swap(m *Module) *Module {
	old := h.cur.Swap(m)
	if old != nil && old != m {
		old.Retire()
	}
	return old
}

// Handle runs the job on the current module, or on the canary if one runs and takes it.
func (h *Handler) Handle(ctx context.Context, job *worker.Job) worker.Result {
	c := h.can.Load()
	role := RoleCurrent
	var m *Module
	if c != nil && c.takes(job.Envelope.ID, job.Attempt) && c.m.begin() == nil {
		m, role = c.m, RoleCanary
	} else {
		var ok bool
		if m, ok = h.begin(); !ok {
			return worker.Result{Outcome: worker.Failed, Reason: "module " + m.name + " was removed", Handler: m.name, Version: m.version}
		}
	}
	log := h.log
	// The lines go to the host's log and, up to MaxResultLogs, into the result, for
	// the job's record. The guest's call is synchronous, so the slice needs no lock.
	var lines []string
	sink := func(level slog.Level, msg string) {
		log.LogAttrs(ctx, level, msg,
			slog.String("job", job.Envelope.ID), slog.String("queue", job.Envelope.Queue),
			slog.String("module", m.name), slog.String("version", m.version), slog.Int("attempt", job.Attempt))
		if len(lines) < MaxResultLogs {
			lines = append(lines, level.String()+" "+msg)
		}
	}
	x := m.run(ctx, job, sink)
	res := m.Settle(&x, job, time.Now())
	res.Logs = lines
	if c != nil {
		res.Role = role
		if role == RoleCanary && runFailed(res) && res.Reason != "" {
			// The job's record keeps the last failure's reason while it retries on the
			// current version: it says which version failed it.
			res.Reason = "on canary " + m.version[:min(12, len(m.version))] + ": " + res.Reason
		}
		// A run an operator cancelled says nothing of the version: it is not counted,
		// lest cancelling stuck jobs roll a canary back as failed.
		if x.Cause != CauseCancelled {
			h.record(c, role, res)
		}
	}
	return res
}

// begin counts a job in on the current module and returns it. It reports false, the
// job not counted in, when the module was retired with no successor: it was removed.
func (h *Handler) begin() (*Module, bool) {
	m := h.cur.Load()
	for m.begin() != nil {
		// Retired between the load and begin: a swap put a new version in place first.
		next := h.cur.Load()
		if next == m {
			return m, false
		}
		m = next
	}
	return m, true
}

// MaxResultLogs bounds the guest log lines a Handler returns in a job's result (each
// "LEVEL message", already cut to the manifest's max_log_message); the manifest's
// max_log_lines bounds them first, and a backend that keeps them caps them again.
const MaxResultLogs = 1000

// Queue returns the worker.Queue that serves the module's queue with h, its policies
// taken from the module's manifest.
func (h *Handler) Queue() worker.Queue { return h.queueFor(h.Module()) }

// queueFor returns the worker.Queue that serves m's queue with h, before m is swapped
// in: the queue is registered first, so that a failed registration changes nothing.
func (h *Handler) queueFor(m *Module) worker.Queue {
	man := m.Manifest()
	return worker.Queue{
		Name:           man.Queue,
		Handler:        h,
		Concurrency:    man.Concurrency,
		KeyConcurrency: man.KeyConcurrency,
		MaxAttempts:    man.MaxAttempts,
		MaxDefers:      man.MaxDefers,
		Backoff:        worker.Backoff{Base: man.BackoffBase, Cap: man.BackoffCap},
		Rate:           rate.Limit(man.RateLimit.PerSecond),
		Burst:          man.RateLimit.Burst,
		TraceChild:     man.TraceChild,
	}
}
