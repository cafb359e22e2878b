package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

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
		trial = h.canaryModule()
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
