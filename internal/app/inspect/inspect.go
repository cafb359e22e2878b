// Package inspect is the operator's side of a host: one Inspector that reads and acts
// on queues, jobs, dead letters, modules, schedules and rates, and takes new jobs under
// the enqueue rules. The HTTP API (internal/app/api) and the dashboard (internal/app/ui) are
// thin layers over it, so that the two never answer differently. It owns every check
// for the backend's optional interfaces (backend.StatsReader, backend.JobController and
// the others), made once when the Inspector is built; the in-memory job records that
// stand in where a backend keeps none (Records); the one mapping of its errors to an
// HTTP status (HTTPError); and what both front ends share for their sign-in (the limit
// of wrong tokens, the bearer token, the loopback Host check).
package inspect

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

// Config is what an Inspector reads and acts on. Nil fields have the defaults given.
type Config struct {
	// Backend is the host's backend.
	Backend backend.Backend
	// Registry is the host's module registry: what is served, and the modules' limits.
	// Nil serves nothing (every queue is unknown).
	Registry *host.Registry
	// Running reports the running jobs per queue (worker.Worker.Running); nil reports
	// none.
	Running func() map[string]int
	// Records is this host's memory of its recent jobs, read where the backend keeps no
	// job records (it is not a backend.JobRecordReader) and ignored where it does; nil
	// remembers nothing.
	Records *Records
	// Rates gives the queues' recent settles and failures; nil reports zeros.
	Rates *Rates
	// Schedules lists the modules' periodic schedules; nil lists none.
	Schedules func() []schedule.Status
	// RefusedPushes lists the module pushes this host refused (internal/app/fleet); nil,
	// or a nil answer, lists none.
	RefusedPushes func() any
	// Refusal says why the host takes no new jobs, nil while it takes them: enqueues,
	// retries and replays fail with its error (one wrapping ErrDraining: not started
	// yet, or draining) while it has one, so that no job is accepted that the drain
	// would then drop. Nil means the host always takes them.
	Refusal func() error
	// CancelRunning cancels a job that runs on this host and waits for its settle
	// (worker.Worker.Cancel): a cancel the backend cannot carry out on a waiting job
	// (the job is running, or the backend finds no job by id) asks it, for at most
	// CancelRunningWait. Nil cancels only waiting jobs.
	CancelRunning func(ctx context.Context, id string) error
	// Logger logs what fails while reading (a queue's counts); nil discards.
	Logger *slog.Logger
	// Tracer, when set, makes a send span for each enqueue (one per request) whose
	// context the jobs carry; nil traces nothing.
	Tracer trace.Tracer
}

// CancelRunningWait bounds how long a cancel waits for a running job to stop and
// settle (Config.CancelRunning): a handler that never reaches an interrupt check
// (a host call that ignores its context) makes the cancel fail with the deadline
// while the job still settles as cancelled once it returns.
const CancelRunningWait = 10 * time.Second

// Checkpointer is implemented by backends that can copy their store, consistently,
// while they run (the pebble backend): a backup uses it.
type Checkpointer interface {
	// Checkpoint writes a consistent copy of the store into dir, which must not exist.
	Checkpoint(ctx context.Context, dir string) error
}

// Inspector is the operator's view of one host. Its methods are safe for concurrent
// use.
type Inspector struct {
	tracer trace.Tracer // nil: tracing off
	cfg    Config
	log    *slog.Logger
	// What the backend can do, asserted once; nil where it cannot.
	stats      backend.StatsReader
	dead       backend.DeadLetterStore
	control    backend.JobController
	envelopes  backend.JobEnvelopeReader
	batch      backend.BatchPublisher
	unique     backend.UniquePublisher
	groups     backend.GroupStore
	checkpoint Checkpointer
	health     interface{ Err() error }
	// records and lister read jobs: the backend's own where it keeps records (own),
	// else the host's memory (Config.Records), mem; nil where neither is.
	own     bool
	listed  bool // the backend's own lister
	records backend.JobRecordReader
	lister  backend.JobLister
	mem     *Records
}

// New returns the Inspector of cfg.
func New(cfg Config) *Inspector {
	if cfg.Refusal == nil {
		cfg.Refusal = func() error { return nil }
	}
	in := &Inspector{cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), tracer: cfg.Tracer}
	b := cfg.Backend
	in.stats, _ = b.(backend.StatsReader)
	in.dead, _ = b.(backend.DeadLetterStore)
	in.control, _ = b.(backend.JobController)
	in.envelopes, _ = b.(backend.JobEnvelopeReader)
	in.batch, _ = b.(backend.BatchPublisher)
	in.unique, _ = b.(backend.UniquePublisher)
	in.groups, _ = b.(backend.GroupStore)
	in.checkpoint, _ = b.(Checkpointer)
	in.health, _ = b.(interface{ Err() error })
	if rr, ok := b.(backend.JobRecordReader); ok {
		in.own, in.records = true, rr
		in.lister, in.listed = b.(backend.JobLister)
	} else if cfg.Records != nil {
		in.mem, in.records, in.lister = cfg.Records, cfg.Records, cfg.Records
	}
	return in
}

// Can says which of the backend's optional parts the operator may use.
type Can struct {
	// Count: the backend counts a queue's messages (backend.StatsReader).
	Count bool
	// DeadLetters: it lists, replays and purges dead letters (backend.DeadLetterStore).
	DeadLetters bool
	// Act: it cancels, retries and deletes one job by id (backend.JobController).
	Act bool
	// Records: it keeps job records of its own, across restarts (backend.JobRecordReader).
	Records bool
	// List: it lists a queue's jobs from its records (backend.JobLister); without, a
	// listing shows what this host remembers.
	List bool
	// CancelRunning: a job running on this host can be cancelled, whatever the
	// backend (Config.CancelRunning).
	CancelRunning bool
	// Groups: it keeps workflows and batches (backend.GroupStore).
	Groups bool
}

// Can reports what the backend can do.
func (in *Inspector) Can() Can {
	return Can{Count: in.stats != nil, DeadLetters: in.dead != nil, Act: in.control != nil, Records: in.own, List: in.listed,
		CancelRunning: in.cfg.CancelRunning != nil, Groups: in.groups != nil}
}

// Refusal says why the host takes no new jobs (Config.Refusal): nil while it takes
// them, else an error wrapping ErrDraining.
func (in *Inspector) Refusal() error { return in.cfg.Refusal() }

// modules are the registry's modules (none without a registry).
func (in *Inspector) modules() []host.ModuleStatus {
	if in.cfg.Registry == nil {
		return nil
	}
	return in.cfg.Registry.Modules()
}

// ServedQueues are the queues a module serves, in the registry's order.
func (in *Inspector) ServedQueues() []string {
	var qs []string
	for _, m := range in.modules() {
		if m.Serving() {
			qs = append(qs, m.Queue)
		}
	}
	return qs
}

// Served returns the module serving queue, or an error wrapping
// backend.ErrUnknownQueue that names the served queues.
func (in *Inspector) Served(queue string) (host.ModuleStatus, error) {
	var names []string
	for _, m := range in.modules() {
		if !m.Serving() {
			continue
		}
		if m.Queue == queue {
			return m, nil
		}
		names = append(names, m.Queue)
	}
	slices.Sort(names)
	return host.ModuleStatus{}, errorf(backend.ErrUnknownQueue, "unknown queue %q: no module serves it (served: %s)", queue, joinComma(names))
}

// StoreFailed reports whether the backend says its store broke (the pebble backend's
// Err, non-nil once a commit failed: that commit may have reached the disk).
func (in *Inspector) StoreFailed() bool { return in.health != nil && in.health.Err() != nil }

// Checkpointer returns the backend's Checkpointer, or an error wrapping
// ErrUnavailable saying why there is none.
func (in *Inspector) Checkpointer() (Checkpointer, error) {
	if in.checkpoint == nil {
		return nil, errorf(ErrUnavailable, "this backend keeps no data of its own to back up (only the pebble backend does): back RabbitMQ, or PostgreSQL, up with its own tools (for PostgreSQL pg_dump --schema of the wasmjobs schema, or the database's base backups and WAL archive)")
	}
	return in.checkpoint, nil
}
