package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/worker"
)

// Defaults of RegistryConfig.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultRescan   = 5 * time.Second
	DefaultDrain    = 30 * time.Second
)

// How soon the registry looks at a change before its debounce runs out.
const (
	// settleDelay is the least time between two looks at the directory before the
	// debounce: the first event after a quiet spell is looked at at once, and the
	// events that follow it closely (the writes of a file, many files changed
	// together) are looked at together, so that a stream of events costs at most a
	// read of the directory's names and fingerprints each settleDelay.
	settleDelay = time.Millisecond
	// writingPoll is how often it looks again at a module file still open for
	// writing, until its writer closes it or the debounce runs out: no event says
	// that a writer closed a file (fsnotify does not expose inotify's CLOSE_WRITE).
	writingPoll = 5 * time.Millisecond
	// canarySaveEvery is how long after a canary under way changed (a job counted, or
	// a tick of trialSaveEvery: the time it ran grows) its state is saved in its
	// history: a kill of the host loses the counts of that last stretch at most (a
	// drain saves them all, at Retire), and a busy canary costs a durable write each
	// canarySaveEvery, not one a job.
	canarySaveEvery = 250 * time.Millisecond
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

// ModuleStatus describes a module of the directory.
type ModuleStatus struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Queue string `json:"queue,omitempty"`
	// Version is the sha256 of the serving bytes; empty while none serves.
	Version  string    `json:"version,omitempty"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Status is "serving" or "rejected" (no version serves).
	Status string `json:"status"`
	// Error is why the last change was rejected, if it was; a serving module keeps
	// serving its previous version.
	Error string `json:"error,omitempty"`
	// InFlight counts jobs running on the serving version.
	InFlight int `json:"in_flight"`
	// Canary is the new version on trial, if one is.
	Canary *CanaryStatus `json:"canary,omitempty"`
	// LastRollout is how the last canary ended: promoted or rolled back, why, with the
	// two failure rates.
	LastRollout *Verdict `json:"last_rollout,omitempty"`
	// Pinned is the version a rollback pinned, serving until the files change.
	Pinned *Pin `json:"pinned,omitempty"`
	// Breakers are the circuit breakers of the module's outbound HTTP on this host,
	// one per destination it called (at most outbound.MaxBreakers).
	Breakers []outbound.BreakerState `json:"breakers,omitempty"`
	// HTTP is the serving version's outbound HTTP grant; nil without one.
	HTTP *HTTPGrant `json:"http,omitempty"`
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

type namedVerdict struct {
	name string
	v    Verdict
}

// fingerprint identifies the files' contents cheaply: size, modification time and
// inode of the module and its manifest, links followed.
type fingerprint struct {
	wasm, manifest fileID
}

type fileID struct {
	size  int64
	mtime time.Time
	ino   uint64
	ok    bool
}

func statID(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime(), ok: true}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id
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

// follow reads the directory when its watcher reports a change: at once for the
// modules whose files are finished, after the debounce for the rest; and at every
// rescan.
func (r *Registry) follow() {
	defer close(r.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.watcher != nil {
		events, errs = r.watcher.Events, r.watcher.Errors
	}
	rescan := time.NewTicker(r.cfg.Rescan)
	defer rescan.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	// settle reads what is finished before the debounce runs out: armed by an event
	// that came less than settleDelay after the last such read, and again while a
	// module file is open for writing.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	settleArmed := false
	var lastSettle time.Time // when the last read before the debounce began
	var burst time.Time      // when the first event of the changes not read yet came
	// save saves the canaries' state canarySaveEvery after one changed.
	save := time.NewTimer(time.Hour)
	save.Stop()
	saveArmed := false
	settled := func() {
		lastSettle = time.Now()
		switch r.read(r.ctx, burst, true) {
		case readAll:
			debounce.Stop() // nothing left for it to read
			burst = time.Time{}
		case leftWriting:
			settle.Reset(writingPoll)
			settleArmed = true
		case leftUnsure: // the debounce reads it
		}
	}
	for {
		select {
		case <-r.ctx.Done():
			debounce.Stop()
			settle.Stop()
			save.Stop()
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Op != fsnotify.Chmod {
				if burst.IsZero() {
					burst = time.Now()
				}
				debounce.Reset(r.cfg.Debounce)
				switch wait := settleDelay - time.Since(lastSettle); {
				case settleArmed:
				case wait <= 0:
					settled()
				default:
					settle.Reset(wait)
					settleArmed = true
				}
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// An overflow loses events: the next read of the directory catches up.
			r.log.Warn("watching the modules directory", "dir", r.cfg.Dir, "error", err)
			debounce.Reset(r.cfg.Debounce)
		case <-settle.C:
			settleArmed = false
			settled()
		case <-debounce.C:
			settle.Stop()
			settleArmed = false
			r.sync(r.ctx, burst)
			burst = time.Time{}
		case <-rescan.C:
			r.Sync(r.ctx)
		case <-r.kick:
			r.Sync(r.ctx)
		case <-r.endc:
			r.recordEnded(r.ctx)
		case <-r.changec:
			if !saveArmed {
				save.Reset(canarySaveEvery)
				saveArmed = true
			}
		case <-save.C:
			saveArmed = false
			r.saveCanaries(r.ctx, true)
		}
	}
}

// Rescan asks the registry to read the directory now, without waiting for Rescan.
func (r *Registry) Rescan() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Sync reads the directory once and brings the modules in line with it.
func (r *Registry) Sync(ctx context.Context) { r.sync(ctx, time.Time{}) }

// sync is Sync after a burst of watcher events, the first of which came at noticed.
func (r *Registry) sync(ctx context.Context, noticed time.Time) { r.read(ctx, noticed, false) }

// left is what a read of the directory left unread, in order: the larger of two is
// what both need.
type left int

const (
	readAll     left = iota // every change was read (or there was none)
	leftUnsure              // a change that may be unfinished: the debounce reads it
	leftWriting             // a module file open for writing: look again soon
)

// read reads the directory and brings the modules in line with it, after a burst of
// watcher events the first of which came at noticed. A quick read, before the debounce
// ran out, reads only the modules whose changed files are finished (see finished) and
// removes nothing; it says what it left.
func (r *Registry) read(ctx context.Context, noticed time.Time, quick bool) left {
	if err := r.lockSync(ctx); err != nil {
		return leftUnsure
	}
	defer r.unlockSync()
	r.noticed = noticed
	names, err := r.list()
	if err != nil {
		r.log.Error("reading the modules directory", "dir", r.cfg.Dir, "error", err)
		return leftUnsure
	}
	if !quick && !r.swept {
		r.endTrialsOfGone(names)
	}
	res := readAll
	for _, name := range names {
		res = max(res, r.syncModule(ctx, name, quick))
	}
	r.mu.Lock()
	var gone []string
	for name := range r.entries {
		if !slices.Contains(names, name) {
			gone = append(gone, name)
		}
	}
	r.mu.Unlock()
	if quick && len(gone) > 0 {
		// A file that is gone may be in the middle of a replacement (an editor renames
		// the old file away, then writes the new one): the debounce decides.
		return max(res, leftUnsure)
	}
	for _, name := range gone {
		r.remove(ctx, name)
	}
	return res
}

// endTrialsOfGone ends in the history the canaries kept for the modules whose files
// are not among names (those of the directory): removed while the host was down, they
// end as remove ends a module removed while the host runs, so that files put back
// later serve as a new module's rather than resume a trial of long ago. Once, at the
// first full read that lists the history: later removals go through remove. Called
// with the slot held.
func (r *Registry) endTrialsOfGone(names []string) {
	kept, err := r.hist.modules()
	if err != nil {
		r.log.Warn("listing the module history: the canaries of modules removed while the host was down are kept until a later read lists it", "error", err)
		return
	}
	r.swept = true
	for _, name := range kept {
		if slices.Contains(names, name) {
			continue
		}
		c := r.hist.canary(name)
		if c == nil {
			continue
		}
		r.markHistory(name, c.Version, HistorySuperseded, "the module's files were gone when the host started")
		r.log.Info("module canary under way when the host stopped superseded: the module's files were removed while it was down",
			"module", name, "canary_version", c.Version, "current_version", c.Current)
	}
}

// finished tells whether a module's changed files, of fingerprint fp (seen is the
// fingerprint last read), are finished as far as can be told before the debounce runs
// out: the module file is there, the manifest did not go away, and no process has
// either open for writing. A file renamed into place, or written and closed, is
// finished; one still open for writing may be half written; and where the system
// cannot tell (no read leases), nothing is finished before the debounce.
func finished(file string, fp, seen fingerprint) left {
	if !fp.wasm.ok || (seen.manifest.ok && !fp.manifest.ok) {
		return leftUnsure // perhaps gone for good, perhaps in the middle of a replacement
	}
	paths := []string{file}
	if fp.manifest.ok {
		paths = append(paths, ManifestPath(file))
	}
	for _, p := range paths {
		switch writing, known := openForWriting(p); {
		case writing:
			return leftWriting
		case !known:
			return leftUnsure
		}
	}
	return readAll
}

// wholeModule reports whether wasm is a Wasm binary whose sections end exactly at its
// end. A file cut short inside a section is not; a writer that opens and closes the
// file for each piece it appends could otherwise be caught between two pieces.
func wholeModule(wasm []byte) bool {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return false
	}
	for b := wasm[8:]; len(b) > 0; {
		b = b[1:] // the section's id
		var size uint64
		n := 0
		for shift := 0; ; shift += 7 {
			if n == len(b) || n == 5 { // a u32 takes at most 5 bytes
				return false
			}
			c := b[n]
			n++
			size |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
		}
		b = b[n:]
		if uint64(len(b)) < size {
			return false
		}
		b = b[size:]
	}
	return true
}

// list returns the module names of the directory: regular files (links followed) named
// NAME.wasm, NAME not starting with a dot.
func (r *Registry) list() ([]string, error) {
	des, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".wasm") || len(n) == len(".wasm") {
			continue
		}
		fi, err := os.Stat(filepath.Join(r.cfg.Dir, n))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		names = append(names, strings.TrimSuffix(n, ".wasm"))
	}
	return names, nil
}

// syncModule loads the module name if its files changed. A quick read loads it only if
// they are finished, and says what it left.
func (r *Registry) syncModule(ctx context.Context, name string, quick bool) left {
	file := filepath.Join(r.cfg.Dir, name+".wasm")
	fp := fingerprint{wasm: statID(file), manifest: statID(ManifestPath(file))}
	r.mu.Lock()
	e := r.entries[name]
	var seen fingerprint
	if e != nil {
		seen = e.seen
	}
	r.mu.Unlock()
	if e != nil && seen == fp {
		return readAll
	}
	if quick {
		if l := finished(file, fp, seen); l != readAll {
			return l // no entry made yet for a new module: it is not one until read
		}
	}
	if e == nil {
		e = &entry{file: file}
		r.mu.Lock()
		r.entries[name] = e
		r.mu.Unlock()
	}
	read := time.Now()
	wasm, err := os.ReadFile(file)
	if err != nil {
		r.reject(e, name, fp, err)
		return readAll
	}
	manText, err := os.ReadFile(ManifestPath(file))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.reject(e, name, fp, &ManifestError{File: ManifestPath(file), Problem: err.Error()})
		return readAll
	}
	if statID(file) != fp.wasm || statID(ManifestPath(file)) != fp.manifest {
		return leftWriting // still being written: the next event or rescan reads it again
	}
	if quick && !wholeModule(wasm) {
		return leftUnsure // not whole, though closed: the debounce reads (and rejects) it
	}
	r.load(ctx, e, name, file, fp, wasm, manText, read)
	return readAll
}

// load puts in service the version of module name read (at read) from its files of
// fingerprint fp: wasm and the manifest's text manText.
func (r *Registry) load(ctx context.Context, e *entry, name, file string, fp fingerprint, wasm, manText []byte, read time.Time) {
	v := VersionOf(wasm, manText)
	r.mu.Lock()
	h, m := e.handler, e.pending
	sameFiles := e.pendingFP == fp
	e.pending = nil
	pin := e.pin
	r.mu.Unlock()
	if m != nil && !sameFiles {
		m.Retire() // the files changed since: load them
		m = nil
	}
	var trial *Module // loaded once: the canary may end between two loads
	if h != nil {
		trial = h.CanaryModule()
	}
	if h != nil && (h.Module().Version() == v || (pin != nil && pin.FileVersion == v) ||
		(trial != nil && trial.Version() == v)) {
		// Nothing new: the version serving, the one on trial, or the files a rollback
		// holds back.
		r.mu.Lock()
		e.seen, e.fileVersion = fp, v
		retry := e.policyPending
		r.mu.Unlock()
		if retry {
			err := r.cfg.Queues.Register(ctx, h.queueFor(h.Module()))
			r.mu.Lock()
			if err != nil {
				e.err, e.seen = fmt.Errorf("serving the promoted version's queue policy on %q: %w", h.Module().Queue(), err), fingerprint{}
			} else {
				e.err, e.policyPending = nil, false
			}
			r.mu.Unlock()
		}
		if pin != nil && pin.FileVersion != v {
			r.setPin(e, name, nil) // the files now hold the serving version
		}
		if m != nil {
			m.Retire()
		}
		return
	}
	if h == nil && m == nil {
		// After a restart, a rollback's pin holds: the pinned version serves, and files
		// changed since go on trial beside it.
		if p := r.hist.pin(name); p != nil {
			pm, err := r.loadKept(ctx, name, file, p.Version)
			if err != nil {
				r.log.Error("module pinned to a version that cannot be loaded: serving its files", "module", name, "pinned_version", p.Version, "error", err)
				r.setPin(e, name, nil)
			} else {
				if !r.serve(ctx, e, name, pm, fp, nil, read) {
					return
				}
				if p.FileVersion == v {
					r.mu.Lock()
					e.pin, e.fileVersion = p, v
					r.mu.Unlock()
					r.log.Info("module pinned by a rollback: serving the pinned version, not its files", "module", name, "version", p.Version, "file_version", v, "reason", p.Reason)
					return
				}
				r.setPin(e, name, nil)
				h = r.Handler(name)
			}
		}
	}
	var resume *canaryState // the trial under way before a restart, to take up again
	if h == nil && m == nil {
		// After a restart, a canary under way holds too: the version it was on trial
		// against serves, and the trial goes on.
		if c := r.hist.canary(name); c != nil {
			var stop bool
			if resume, stop = r.restoreTrial(ctx, e, name, fp, v, c, read); stop {
				return
			}
			if h = r.Handler(name); h != nil && h.Module().Version() == v {
				r.mu.Lock()
				e.fileVersion = v
				r.mu.Unlock()
				return // the files hold the serving version again
			}
		}
	}
	if m == nil {
		man, err := ParseManifest(ManifestPath(file), manText)
		if err != nil {
			r.reject(e, name, fp, err)
			return
		}
		if m, err = r.cfg.Engine.Load(ctx, name, wasm, man); err != nil {
			r.reject(e, name, fp, err)
			return
		}
		m.version = v
	}
	ro := r.rollout(m)
	if h != nil && ro.Strategy == StrategyCanary && h.Module().Queue() == m.Queue() {
		r.startCanary(e, name, h, m, fp, wasm, manText, read, resume)
		return
	}
	if h != nil {
		if cv, ok := h.endNow(VerdictSuperseded, "replaced by "+v+" at once"); ok {
			r.applyVerdict(ctx, name, cv)
		}
	}
	if r.serve(ctx, e, name, m, fp, manText, read) {
		if err := r.hist.add(name, v, wasm, manText, HistoryCurrent, ro.History); err != nil {
			r.log.Warn("keeping a module version in the history", "module", name, "version", v, "error", err)
		}
		r.markHistory(name, v, HistoryCurrent, "")
		r.mu.Lock()
		e.fileVersion = v
		r.mu.Unlock()
		r.setPin(e, name, nil)
	}
}

// restoreTrial puts back, at a restart, the version that served beside the canary c
// under way when the host stopped: that version serves again, loaded from the
// history, and c is returned to be taken up if the files (of version v) still hold
// c's version; files changed while the host was down end c as superseded (the next
// step of load puts them on trial instead). If that version is gone from the history,
// the trial cannot resume: that is logged, and the files serve at once. stop reports
// that load must stop here: the version could not be loaded for another reason (an
// I/O error, the context ended, a failed compile), or could not be served; nothing
// serves, and the next read tries again, so that a passing error never puts the
// untried version on every job.
func (r *Registry) restoreTrial(ctx context.Context, e *entry, name string, fp fingerprint, v string, c *canaryState, read time.Time) (resume *canaryState, stop bool) {
	cur, err := r.loadKept(ctx, name, e.file, c.Current)
	if errors.Is(err, ErrUnknownVersion) {
		r.log.Error("a canary under way when the host stopped cannot resume: the version it was on trial against is gone from the module history; the module's files serve at once, with no trial",
			"module", name, "canary_version", c.Version, "current_version", c.Current, "file_version", v, "error", err)
		r.markHistory(name, c.Version, HistorySuperseded, "the host restarted and the version it was on trial against was gone from the history: "+err.Error())
		return nil, false
	}
	if err != nil {
		err = fmt.Errorf("resuming the canary %s under way when the host stopped: loading the version %s it was on trial against: %w", c.Version, c.Current, err)
		r.mu.Lock()
		e.seen, e.err = fingerprint{}, err // not seen: the next read tries again
		r.mu.Unlock()
		r.log.Error("module not served: the canary under way when the host stopped cannot resume yet; trying again at the next read of the directory",
			"module", name, "canary_version", c.Version, "current_version", c.Current, "file_version", v, "error", err)
		r.emit(RegistryEvent{Kind: "rejected", Module: name, File: e.file, Err: err, At: time.Now()})
		return nil, true
	}
	if !r.serve(ctx, e, name, cur, fp, nil, read) {
		// Not left pending as if it were the files' version: the next read restores
		// the trial again.
		r.mu.Lock()
		if e.pending == cur {
			e.pending = nil
		}
		r.mu.Unlock()
		cur.Retire()
		return nil, true
	}
	if v != c.Version {
		reason := "the module's files changed to " + v + " while the host was down"
		r.markHistory(name, c.Version, HistorySuperseded, reason)
		r.log.Info("module canary under way when the host stopped superseded: the files changed while it was down", "module", name,
			"canary_version", c.Version, "current_version", c.Current, "file_version", v)
		return nil, false
	}
	return c, false
}

// serve puts m in service at once: as the module's first version, as a swap, or as a
// move to another queue. It reports whether m serves; if not, it was recorded as
// rejected or unserved.
func (r *Registry) serve(ctx context.Context, e *entry, name string, m *Module, fp fingerprint, manText []byte, read time.Time) bool {
	file := e.file
	r.mu.Lock()
	h := e.handler
	r.mu.Unlock()
	kind, at := "loaded", time.Now()
	fresh := h == nil // a new handler: not serving until its queue is registered
	if h == nil {
		h = NewHandler(m, r.log)
	} else {
		kind = "swapped"
		if old := h.Module(); old.Queue() != m.Queue() {
			// The module moves to another queue: stop the old one first.
			r.unregister(ctx, name, old.Queue())
			old.Retire()
			r.mu.Lock()
			e.handler = nil // its queue is no longer served
			r.mu.Unlock()
			h, fresh = NewHandler(m, r.log), true
		}
	}
	// The queue's new policy first, the new version second: if the registration fails,
	// the serving version keeps serving under the policy it was registered with.
	if err := r.cfg.Queues.Register(ctx, h.queueFor(m)); err != nil {
		r.unserved(e, name, m, fp, fresh, fmt.Errorf("serving queue %q: %w", m.Queue(), err))
		return false
	}
	if !fresh {
		h.Swap(m)
	}
	r.mu.Lock()
	e.handler, e.seen, e.err = h, fp, nil
	r.mu.Unlock()
	r.log.Info("module "+kind, "module", name, "file", file, "version", m.Version(), "queue", m.Queue())
	r.emit(RegistryEvent{Kind: kind, Module: name, File: file, Version: m.Version(), At: at, Noticed: r.noticed, Read: read})
	return true
}

// startCanary puts m on trial beside h's current version, or, with from (a trial of m
// against that version, under way when the host stopped), takes that trial up again
// with its counts. The queue keeps the current version's policy until the canary is
// promoted.
func (r *Registry) startCanary(e *entry, name string, h *Handler, m *Module, fp fingerprint, wasm, manText []byte, read time.Time, from *canaryState) {
	ro := r.rollout(m)
	if from != nil && (from.Version != m.Version() || from.Current != h.Module().Version()) {
		from = nil
	}
	if from == nil {
		// A resumed trial's version is kept already, with the time it was added.
		if err := r.hist.add(name, m.Version(), wasm, manText, HistoryCanary, ro.History); err != nil {
			r.log.Warn("keeping a module version in the history", "module", name, "version", m.Version(), "error", err)
		}
	}
	if old := h.CanaryModule(); old != nil {
		if v, ok := h.endNow(VerdictSuperseded, "replaced by "+m.Version()); ok {
			r.applyVerdict(r.ctx, name, v)
		}
	}
	at := time.Now()
	h.startTrial(m, ro, trial{onEnd: r.canaryEnded(name), onChange: r.canaryChanged, from: from})
	r.mu.Lock()
	e.seen, e.fileVersion, e.err = fp, m.Version(), nil
	r.mu.Unlock()
	r.setPin(e, name, nil)
	cur := h.Module().Version()
	if from != nil {
		r.log.Info("module canary resumed after a restart", "module", name, "file", e.file, "canary_version", m.Version(), "current_version", cur,
			"started_at", from.StartedAt, "ran", from.Ran, "canary_jobs_counted", from.Jobs, "canary_failed", from.Failed,
			"current_jobs_counted", from.CurrentJobs, "current_failed", from.CurrentFailed,
			"canary_percent", ro.CanaryPercent, "canary_jobs", ro.CanaryJobs, "canary_time", ro.CanaryTime)
	} else {
		// Saved at once, so that a restart from now on resumes the trial.
		r.saveCanary(name, h, false)
		r.log.Info("module canary started", "module", name, "file", e.file, "canary_version", m.Version(), "current_version", cur,
			"canary_percent", ro.CanaryPercent, "canary_jobs", ro.CanaryJobs, "canary_time", ro.CanaryTime)
	}
	r.emit(RegistryEvent{Kind: "canary", Module: name, File: e.file, Version: cur, Canary: m.Version(), At: at, Noticed: r.noticed, Read: read})
}

// rollout returns m's rollout: its manifest's settings over the registry's, defaults
// filled in.
func (r *Registry) rollout(m *Module) Rollout {
	ro, d := m.Manifest().Rollout, r.cfg.Rollout
	if ro.Strategy == "" {
		ro.Strategy = d.Strategy
	}
	if ro.CanaryPercent == 0 {
		ro.CanaryPercent = d.CanaryPercent
	}
	if ro.CanaryJobs == 0 {
		ro.CanaryJobs = d.CanaryJobs
	}
	if ro.CanaryTime == 0 {
		ro.CanaryTime = d.CanaryTime
	}
	if ro.CanaryMaxFailureDelta == 0 {
		ro.CanaryMaxFailureDelta = d.CanaryMaxFailureDelta
	}
	if ro.CanaryMinJobs == 0 {
		ro.CanaryMinJobs = d.CanaryMinJobs
	}
	if ro.History == 0 {
		ro.History = d.History
	}
	return ro.withDefaults()
}

// canaryEnded returns the callback of a canary of the module name: it hands the
// verdict to follow, which records it (the callback runs on a job's goroutine and must
// not wait on the disk or the backend).
func (r *Registry) canaryEnded(name string) func(Verdict) {
	return func(v Verdict) {
		r.mu.Lock()
		r.ended = append(r.ended, namedVerdict{name, v})
		r.mu.Unlock()
		select {
		case r.endc <- struct{}{}:
		default:
		}
	}
}

// canaryChanged is the callback of every canary for a change (a job counted, a tick
// of trialSaveEvery): it tells follow, which saves its state soon (it runs on a job's
// or a timer's goroutine and must not wait on the disk).
func (r *Registry) canaryChanged() {
	select {
	case r.changec <- struct{}{}:
	default:
	}
}

// saveCanaries saves the canaries under way in their history, so that a restart of the
// host resumes them with their counts and the time they ran: with changedOnly, only
// those that changed (a job counted, a tick of trialSaveEvery) since they were last
// saved. It takes the reconcile slot, so that no verdict is recorded between the
// taking of a canary's state and its saving.
func (r *Registry) saveCanaries(ctx context.Context, changedOnly bool) {
	if err := r.lockSync(ctx); err != nil {
		r.log.Warn("saving the counts of the canaries under way", "error", err)
		return
	}
	defer r.unlockSync()
	r.mu.Lock()
	handlers := make(map[string]*Handler, len(r.entries))
	for name, e := range r.entries {
		if e.handler != nil {
			handlers[name] = e.handler
		}
	}
	r.mu.Unlock()
	for name, h := range handlers {
		r.saveCanary(name, h, changedOnly)
	}
}

// saveCanary saves h's canary under way, if one is, in the history of the module name.
func (r *Registry) saveCanary(name string, h *Handler, changedOnly bool) {
	c := h.trialState(changedOnly)
	if c == nil {
		return
	}
	if err := r.hist.saveCanary(name, c); err != nil {
		r.log.Error("saving a canary under way in the module's history: a restart of the host resumes it with the counts saved before, or not at all",
			"module", name, "canary_version", c.Version, "error", err)
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

// recordEnded records the canaries that ended by themselves.
func (r *Registry) recordEnded(ctx context.Context) {
	if r.lockSync(ctx) == nil {
		r.unlockSync()
	}
}

// applyEnded records the canaries that ended by themselves. Called with the slot held.
func (r *Registry) applyEnded(ctx context.Context) {
	r.mu.Lock()
	ended := r.ended
	r.ended = nil
	r.mu.Unlock()
	for _, nv := range ended {
		r.applyVerdict(ctx, nv.name, nv.v)
	}
}

// applyVerdict records how a canary ended: in the history, the pin (a rollback holds the
// module on the current version until its files change), the queue's policy (a
// promotion brings the new manifest's), the log and an event. Called with the slot held.
func (r *Registry) applyVerdict(ctx context.Context, name string, v Verdict) {
	r.mu.Lock()
	e := r.entries[name]
	var h *Handler
	if e != nil {
		h = e.handler
	}
	r.mu.Unlock()
	if e == nil {
		return
	}
	rates := []any{"module", name, "canary_version", v.Version, "current_version", v.Current, "reason", v.Reason,
		"canary_failure_rate", v.CanaryFailureRate, "current_failure_rate", v.CurrentFailureRate,
		"canary_jobs", v.CanaryJobs, "current_jobs", v.CurrentJobs}
	serving := v.Current
	switch v.Kind {
	case VerdictPromoted:
		serving = v.Version
		r.markHistory(name, v.Version, HistoryCurrent, "")
		if h != nil && h.Module().Version() == v.Version {
			if err := r.cfg.Queues.Register(ctx, h.queueFor(h.Module())); err != nil {
				// The promoted version serves under the old policy: the error shows in
				// the module's status, and the next read registers it again.
				err = fmt.Errorf("serving the promoted version's queue policy on %q: %w", h.Module().Queue(), err)
				r.mu.Lock()
				e.err, e.seen, e.policyPending = err, fingerprint{}, true
				r.mu.Unlock()
				r.log.Error("promoted version serves under the previous queue policy; trying again at the next read of the directory", "module", name, "error", err)
			}
		}
		r.log.Info("module canary promoted", rates...)
	case VerdictRolledBack:
		r.markHistory(name, v.Version, HistoryRolledBack, v.Reason)
		r.mu.Lock()
		fileVersion := e.fileVersion
		r.mu.Unlock()
		// The pin holds the files back on the version that served beside the canary;
		// not if something else serves by now (an operator's rollback, a newer file).
		if fileVersion == v.Version && h != nil && h.Module().Version() == v.Current {
			r.setPin(e, name, &Pin{Version: v.Current, FileVersion: v.Version, Reason: v.Reason, At: v.At})
		}
		r.log.Warn("module canary rolled back", rates...)
	default:
		r.markHistory(name, v.Version, HistorySuperseded, v.Reason)
		r.log.Info("module canary superseded", rates...)
	}
	if h != nil {
		serving = h.Module().Version()
	}
	r.mu.Lock()
	e.last = &v // last, so that a status with it shows the pin too
	r.mu.Unlock()
	r.emit(RegistryEvent{Kind: v.Kind, Module: name, File: e.file, Version: serving, Canary: v.Version, Verdict: &v, At: v.At})
}

// markHistory sets a version's state in the history, logging a failure: the version
// serves or not whatever the disk does, but the log says the history is behind.
func (r *Registry) markHistory(name, version, state, reason string) {
	if err := r.hist.mark(name, version, state, reason); err != nil {
		r.log.Error("keeping a module version's state in the history", "module", name, "version", version, "state", state, "error", err)
	}
}

// setPin sets (nil: clears) the module's pin, in the entry and the history.
func (r *Registry) setPin(e *entry, name string, p *Pin) {
	r.mu.Lock()
	e.pin = p
	r.mu.Unlock()
	if err := r.hist.setPin(name, p); err != nil {
		r.log.Warn("keeping a module's pin", "module", name, "error", err)
	}
}

// loadKept loads a version of the module name kept in the history.
func (r *Registry) loadKept(ctx context.Context, name, file, version string) (*Module, error) {
	wasm, manText, err := r.hist.load(name, version)
	if err != nil {
		return nil, err
	}
	man, err := ParseManifest(ManifestPath(file)+" (kept version "+version+")", manText)
	if err != nil {
		return nil, err
	}
	m, err := r.cfg.Engine.Load(ctx, name, wasm, man)
	if err != nil {
		return nil, err
	}
	m.version = VersionOf(wasm, manText)
	return m, nil
}

// reject records a failed load; the serving version, if any, keeps serving.
func (r *Registry) reject(e *entry, name string, fp fingerprint, err error) {
	r.mu.Lock()
	e.seen, e.err = fp, err
	version := ""
	if e.handler != nil {
		version = e.handler.Module().Version()
	}
	r.mu.Unlock()
	r.log.Error("module rejected", "module", name, "file", e.file, "error", err, "serving_version", version)
	r.emit(RegistryEvent{Kind: "rejected", Module: name, File: e.file, Version: version, Err: err, At: time.Now()})
}

// unserved records a version m whose queue could not be registered, as a rejection
// that the next read of the directory tries again (the files need not change). m
// serves nothing; it waits as the entry's pending version, so that the next read of
// the same files registers it without compiling it again. The serving version, if
// any, keeps serving under the policy it was registered with.
func (r *Registry) unserved(e *entry, name string, m *Module, fp fingerprint, fresh bool, err error) {
	r.mu.Lock()
	e.seen, e.err = fingerprint{}, err
	e.pending, e.pendingFP = m, fp
	version := ""
	if e.handler != nil {
		version = e.handler.Module().Version()
	}
	r.mu.Unlock()
	msg := "module rejected: its queue could not be registered, so it is not served; trying again at the next read of the directory"
	if !fresh {
		msg = "new version rejected: its queue could not be registered with the new manifest; the previous version keeps serving; trying again at the next read of the directory"
	}
	r.log.Error(msg, "module", name, "file", e.file, "error", err, "rejected_version", m.Version(), "serving_version", version)
	r.emit(RegistryEvent{Kind: "rejected", Module: name, File: e.file, Version: version, Err: err, At: time.Now()})
}

// remove stops serving a module whose file is gone: its queue is no longer consumed,
// its running jobs finish (up to Drain), and its queued jobs stay in the backend.
func (r *Registry) remove(ctx context.Context, name string) {
	r.mu.Lock()
	e := r.entries[name]
	delete(r.entries, name)
	var pending *Module
	if e != nil {
		pending, e.pending = e.pending, nil
	}
	r.mu.Unlock()
	if pending != nil {
		pending.Retire()
	}
	if e == nil || e.handler == nil {
		return
	}
	m := e.handler.Module()
	r.unregister(ctx, name, m.Queue())
	if v, ok := e.handler.endNow(VerdictSuperseded, "the module was removed"); ok {
		// Ended in the history too: a restart resumes no trial of a removed module.
		r.markHistory(name, v.Version, HistorySuperseded, v.Reason)
	}
	m.Retire()
	r.log.Info("module removed", "module", name, "file", e.file, "queue", m.Queue())
	r.emit(RegistryEvent{Kind: "removed", Module: name, File: e.file, At: time.Now()})
}

func (r *Registry) unregister(ctx context.Context, name, queue string) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Drain)
	defer cancel()
	if err := r.cfg.Queues.Unregister(ctx, queue); err != nil {
		r.log.Warn("stopping a module's queue", "module", name, "queue", queue, "error", err)
	}
}

func (r *Registry) emit(ev RegistryEvent) {
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(ev)
	}
}

// Modules describes every module of the directory, sorted by name.
func (r *Registry) Modules() []ModuleStatus {
	out := r.modules()
	// The breakers are read outside r.mu: they are another package's, under locks
	// of their own.
	for i := range out {
		if m := r.Handler(out[i].Name); m != nil && out[i].Status == "serving" {
			out[i].Breakers = m.Module().Breakers()
		}
	}
	return out
}

func (r *Registry) modules() []ModuleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ModuleStatus, 0, len(r.entries))
	for name, e := range r.entries {
		st := ModuleStatus{Name: name, File: e.file, Status: "rejected"}
		if e.handler != nil {
			m := e.handler.Module()
			st.Status, st.Queue, st.Version, st.LoadedAt, st.InFlight = "serving", m.Queue(), m.Version(), m.LoadedAt(), m.InUse()
			st.Canary = e.handler.Canary()
			st.HTTP = grantView(m.Manifest().HTTP)
		}
		st.LastRollout, st.Pinned = e.last, e.pin
		if e.err != nil {
			st.Error = e.err.Error()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ModuleStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Handler returns the handler serving the module name, or nil.
func (r *Registry) Handler(name string) *Handler {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.handler
	}
	return nil
}

// History returns the versions of the module name kept for a rollback, newest first.
// Only a module of the directory has one: any other name (a path, an unknown module)
// is ErrUnknownModule, and neither reads the disk nor stays in memory.
func (r *Registry) History(name string) ([]HistoryEntry, error) {
	if !validModuleName(name) {
		return nil, fmt.Errorf("%w: %q is not a module name", ErrUnknownModule, name)
	}
	r.mu.Lock()
	_, known := r.entries[name]
	r.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModule, name)
	}
	return r.hist.list(name), nil
}

// validModuleName reports whether name can be a module's (a file's base name less
// .wasm): not empty, no path separator, no leading dot, so that it never names a path
// outside the history's directory.
func validModuleName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && !strings.HasPrefix(name, ".") && !strings.ContainsRune(name, 0)
}

// Promote ends the module's canary now and makes it serve every job. It fails with
// ErrNoCanary when none is under way.
func (r *Registry) Promote(ctx context.Context, name string) (Verdict, error) {
	if err := r.lockSync(ctx); err != nil {
		return Verdict{}, err
	}
	defer r.unlockSync()
	h := r.Handler(name)
	if h == nil {
		return Verdict{}, fmt.Errorf("%w: %q", ErrUnknownModule, name)
	}
	v, ok := h.PromoteCanary("promoted by an operator")
	if !ok {
		return Verdict{}, fmt.Errorf("%w: module %s", ErrNoCanary, name)
	}
	r.applyVerdict(ctx, name, v)
	return v, nil
}

// Rollback puts the module back on an earlier version and pins it there until its
// files change (the files are never edited): to is a version of its history (in full,
// or a unique prefix of 6 or more digits); empty means the canary's end if one is
// under way, else the version that served before the current one.
func (r *Registry) Rollback(ctx context.Context, name, to string) (Pin, error) {
	if err := r.lockSync(ctx); err != nil {
		return Pin{}, err
	}
	defer r.unlockSync()
	r.mu.Lock()
	e := r.entries[name]
	var h *Handler
	if e != nil {
		h = e.handler
	}
	r.mu.Unlock()
	if h == nil {
		return Pin{}, fmt.Errorf("%w: %q (or it serves no version)", ErrUnknownModule, name)
	}
	const reason = "rolled back by an operator"
	if to == "" {
		if v, ok := h.RollBackCanary(reason); ok {
			r.applyVerdict(ctx, name, v)
			p := &Pin{Version: v.Current, FileVersion: v.Version, Reason: v.Reason, At: v.At}
			r.setPin(e, name, p)
			r.emit(RegistryEvent{Kind: "pinned", Module: name, File: e.file, Version: v.Current, At: time.Now()})
			return *p, nil
		}
		r.mu.Lock()
		last, pin := e.last, e.pin
		r.mu.Unlock()
		if last != nil && last.Kind == VerdictRolledBack && pin != nil && pin.FileVersion == last.Version &&
			pin.Version == last.Current && h.Module().Version() == pin.Version {
			// The files' canary was rolled back already (by itself, maybe an instant
			// before the call): that rollback's pin is the answer, not one version more
			// (an explicit version goes further back).
			return *pin, nil
		}
		var latest time.Time
		for _, he := range r.hist.list(name) {
			if he.State == HistoryPrevious && he.EndedAt.After(latest) {
				to, latest = he.Version, he.EndedAt
			}
		}
		if to == "" {
			return Pin{}, fmt.Errorf("%w: %s has no earlier version kept", ErrUnknownVersion, name)
		}
	} else {
		var err error
		if to, err = r.hist.resolve(name, to); err != nil {
			return Pin{}, err
		}
	}
	// The target is loaded, checked and its queue registered first: a rollback that
	// fails changes nothing (the canary, if one runs, runs on).
	cur := h.Module()
	var m *Module
	if to != cur.Version() {
		var err error
		if m, err = r.loadKept(ctx, name, e.file, to); err != nil {
			return Pin{}, fmt.Errorf("rolling %s back to %s: %w", name, to, err)
		}
		if m.Queue() != cur.Queue() {
			m.Retire()
			return Pin{}, fmt.Errorf("rolling %s back to %s: that version consumes queue %q, the module serves %q; move it back by changing its files",
				name, to, m.Queue(), cur.Queue())
		}
		if err := r.cfg.Queues.Register(ctx, h.queueFor(m)); err != nil {
			m.Retire()
			return Pin{}, fmt.Errorf("rolling %s back to %s: serving queue %q: %w", name, to, m.Queue(), err)
		}
	}
	if v, ok := h.endNow(VerdictRolledBack, reason+" to "+to); ok {
		r.applyVerdict(ctx, name, v)
	}
	if m != nil {
		h.Swap(m)
		r.markHistory(name, to, HistoryCurrent, "")
		r.markHistory(name, cur.Version(), HistoryRolledBack, reason+" to "+to)
	}
	r.mu.Lock()
	fileVersion := e.fileVersion
	r.mu.Unlock()
	p := &Pin{Version: to, FileVersion: fileVersion, Reason: reason, At: time.Now()}
	r.setPin(e, name, p)
	r.log.Warn("module rolled back by an operator and pinned until its files change", "module", name, "version", to, "previous_version", cur.Version(), "file_version", fileVersion)
	r.emit(RegistryEvent{Kind: "pinned", Module: name, File: e.file, Version: to, At: time.Now()})
	return *p, nil
}
