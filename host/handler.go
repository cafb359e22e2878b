package host

import (
	"context"
	"log/slog"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/wasmjobs/wasmjobs/worker"
)

// Handler is the worker.Handler of a queue served by a module. Swap replaces the module
// while jobs run: a job runs to its end on the version it started on, and the old
// version is closed when its last job ends.
type Handler struct {
	cur atomic.Pointer[Module]
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

// Handle runs the job on the current module.
func (h *Handler) Handle(ctx context.Context, job *worker.Job) worker.Result {
	m := h.cur.Load()
	for m.begin() != nil {
		// Retired between the load and begin: a swap put a new version in place first.
		next := h.cur.Load()
		if next == m {
			return worker.Result{Outcome: worker.Failed, Reason: "module " + m.name + " was removed", Handler: m.name, Version: m.version}
		}
		m = next
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
	res := x.Result()
	res.Logs = lines
	return res
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
		Name:        man.Queue,
		Handler:     h,
		Concurrency: man.Concurrency,
		MaxAttempts: man.MaxAttempts,
		MaxDefers:   man.MaxDefers,
		Backoff:     worker.Backoff{Base: man.BackoffBase, Cap: man.BackoffCap},
		Rate:        rate.Limit(man.RateLimit.PerSecond),
		Burst:       man.RateLimit.Burst,
	}
}
