package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of RegistryConfig.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultRescan   = 5 * time.Second
	DefaultDrain    = 30 * time.Second
)

// Queues is what a Registry registers its modules' queues with: *worker.Worker.
type Queues interface {
	Register(ctx context.Context, q worker.Queue) error
	Unregister(ctx context.Context, name string) error
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Dir is the modules directory: NAME.wasm files, each with an optional NAME.toml.
	Dir string
	// Engine loads the modules.
	Engine *Engine
	// Queues serves each module's queue.
	Queues Queues
	// Logger receives loads, swaps, removals and rejections, and what guests log. Nil
	// discards them.
	Logger *slog.Logger
	// Debounce is how long the directory must be quiet after a change before it is
	// read when the change may be unfinished, so that a file being written is read
	// once, whole. A module whose files are present, closed by every writer and whole
	// (a file renamed into place, or written and closed) is read at once, without
	// waiting for the debounce, where the system can tell (Linux, by a read lease:
	// the files' owner or CAP_LEASE); a removal always waits for it, since a file
	// that is gone may be in the middle of a replacement. Zero means DefaultDebounce.
	Debounce time.Duration
	// Rescan is how often the directory is read even without a change event, to catch
	// events the watcher missed. Zero means DefaultRescan.
	Rescan time.Duration
	// NoWatch turns the file watcher off: changes are seen at the next rescan only
	// (for file systems without inotify, such as some network mounts).
	NoWatch bool
	// Drain bounds how long a removed module's running jobs may take before its queue
	// is dropped anyway (they return to the backend). Zero means DefaultDrain.
	Drain time.Duration
	// OnEvent, if set, is called after every load, swap, removal or rejection, and
	// every rollout event.
	OnEvent func(RegistryEvent)
	// HistoryDir keeps the last versions of each module (bytes, manifest, states and
	// pin) for rollbacks, across restarts. Empty keeps them in memory, for the life of
	// the registry.
	HistoryDir string
	// Rollout is the rollout of a module whose manifest leaves a [rollout] setting out
	// (its zero fields mean Rollout's own defaults: a canary of 10 percent).
	Rollout Rollout
}

// RegistryEvent reports a change of a module.
type RegistryEvent struct {
	// Kind is "loaded" (a new module), "swapped" (a new version), "removed" or
	// "rejected" (a new version or module that failed to load), or a rollout event:
	// "canary" (a new version on trial), "promoted", "rolled_back", "superseded" (a
	// canary replaced by a newer file) or "pinned" (an operator's rollback).
	Kind string
	// Module is the module's name; File its path.
	Module, File string
	// Version is the version now serving ("" after a removal or a rejection of a module
	// that never loaded).
	Version string
	// Err is the rejection's cause.
	Err error
	// Canary is the version on trial, for the rollout events.
	Canary string
	// Verdict is how a canary ended, for promoted, rolled_back and superseded.
	Verdict *Verdict
	// At is when the new version was ready to serve, just before it was put in place.
	At time.Time
	// Noticed is when the watcher first reported the burst of changes whose read
	// loaded this version (zero when a rescan found it); Read is when that read of the
	// files began: as soon as they were seen finished, or after the debounce. With At
	// they split a swap's latency into the watcher's, the wait's before the read and
	// the load's (benchmarks report them).
	Noticed, Read time.Time
}

// Registry keeps a directory's modules in service: it loads each NAME.wasm with its
// manifest, serves its queue through Queues, and follows the directory: a new file is
// loaded and its queue consumed, a changed one is validated and swapped in while jobs
// on the old version finish, a removed one stops being consumed, and a bad one is
// rejected while the previous version keeps serving.
type Registry struct {
	cfg RegistryConfig
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry // by module name
	hist    *historyStore
	ended   []namedVerdict // canaries that ended by themselves, not yet recorded
	endc    chan struct{}  // a canary ended: follow records it
	changec chan struct{}  // a canary changed: follow saves its state soon

	// syncSem is a one-slot semaphore: one reconcile (a read, a Promote, a Rollback,
	// the recording of verdicts) at a time. A channel, not a mutex, so that an operator's
	// call waiting for a long read gives up when its context ends.
	syncSem chan struct{}
	noticed time.Time // guarded by syncSem: RegistryEvent.Noticed of the current reconcile
	// swept: a full read ended the kept canaries of the modules whose files were gone
	// (see endTrialsOfGone). Guarded by syncSem.
	swept   bool
	watcher *fsnotify.Watcher
	kick    chan struct{}
	ctx     context.Context // done at Close: ends the reconcile under way
	cancel  context.CancelFunc
	started bool          // guarded by mu
	closed  bool          // guarded by mu
	done    chan struct{} // closed when follow returns, or by a Start that failed before it
}

// entry is one module name's state.
type entry struct {
	file    string
	handler *Handler // nil while no version serves
	seen    fingerprint
	err     error // the last rejection, cleared by a successful load
	// pending is a version loaded whose queue could not be registered, from the files
	// of pendingFP: the next read tries it again without compiling it again if they did
	// not change, so that an outage does not recompile it at every read.
	pending   *Module
	pendingFP fingerprint
	// fileVersion is the version of the files last read; pin, the rollback that holds
	// the module on another version until they change.
	fileVersion string
	pin         *Pin
	last        *Verdict // how the last canary ended
	// policyPending: the serving version's queue policy could not be registered when it
	// was promoted; the next read registers it again.
	policyPending bool
}

// NewRegistry returns a registry of cfg.Dir. Start loads the modules.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.Engine == nil || cfg.Queues == nil {
		return nil, errors.New("registry: Engine and Queues are required")
	}
	fi, err := os.Stat(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("modules directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("modules directory %s is not a directory", cfg.Dir)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = DefaultRescan
	}
	if cfg.Drain <= 0 {
		cfg.Drain = DefaultDrain
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Registry{
		cfg:     cfg,
		log:     log,
		entries: make(map[string]*entry),
		kick:    make(chan struct{}, 1),
		endc:    make(chan struct{}, 1),
		changec: make(chan struct{}, 1),
		syncSem: make(chan struct{}, 1),
		hist:    newHistoryStore(cfg.HistoryDir, log),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}, nil
}

// Start loads every module of the directory, registers their queues, and follows the
// directory until Close. A module that fails to load is logged and reported by
// Modules; it does not stop the others. A registry starts once; after Close it does
// not start.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return errors.New("registry: start after close")
	case r.started:
		r.mu.Unlock()
		return errors.New("registry: already started")
	}
	r.started = true
	r.mu.Unlock()
	if !r.cfg.NoWatch {
		w, err := fsnotify.NewWatcher()
		if err == nil {
			if err = w.Add(r.cfg.Dir); err != nil {
				w.Close()
			}
		}
		if err != nil {
			// follow never runs: done is closed here, so that Close returns.
			close(r.done)
			return fmt.Errorf("watching %s: %w", r.cfg.Dir, err)
		}
		r.watcher = w
	}
	// The first read ends with ctx or with Close, whichever comes first.
	syncCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	r.Sync(syncCtx)
	stop()
	cancel()
	go r.follow()
	return nil
}

// Close stops following the directory and ends a reconcile under way (a registration
// waiting on the backend gives up). The modules keep serving until Retire. Close is
// idempotent, and returns at once on a registry that never started.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started := r.started
	r.mu.Unlock()
	r.cancel()
	if !started {
		return nil
	}
	<-r.done
	// Verdicts of canaries that ended while follow stopped: recorded now (the pin of an
	// automatic rollback must survive the restart), within Drain.
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Drain)
	r.recordEnded(ctx)
	cancel()
	if r.watcher != nil {
		return r.watcher.Close()
	}
	return nil
}

// Retire retires every module: each closes once its running jobs end. Call it after
// the worker has stopped (and after Close). A canary under way is saved as it stands
// first, counts and all, so that the next start of the host resumes it; a canary that
// ended during the drain has its verdict recorded.
func (r *Registry) Retire() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Drain)
	r.saveCanaries(ctx, false)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.handler != nil {
			e.handler.endNow(VerdictSuperseded, "the host stopped")
			e.handler.Module().Retire()
		}
		if e.pending != nil {
			e.pending.Retire()
			e.pending = nil
		}
	}
}

// lockSync takes the reconcile slot, or returns an error when ctx ends first; then it
// records the verdicts of the canaries that ended by themselves, so that what the
// caller does next sees them (a rollback of a canary already rolled back, a pin set
// after the operator's, would otherwise follow). unlockSync gives the slot back.
func (r *Registry) lockSync(ctx context.Context) error {
	select {
	case r.syncSem <- struct{}{}:
	default:
		select {
		case r.syncSem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the registry's reconcile under way: %w", context.Cause(ctx))
		}
	}
	r.applyEnded(ctx)
	return nil
}

func (r *Registry) unlockSync() { <-r.syncSem }

func (r *Registry) emit(ev RegistryEvent) {
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(ev)
	}
}
