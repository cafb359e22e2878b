package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

type namedVerdict struct {
	name string
	v    Verdict
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
	if old := h.canaryModule(); old != nil {
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
	return m.Manifest().Rollout.over(r.cfg.Rollout).withDefaults()
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
	e, h := r.lookup(name)
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
	v, ok := h.promoteCanary("promoted by an operator")
	if !ok {
		return Verdict{}, fmt.Errorf("%w: module %s", ErrNoCanary, name)
	}
	r.applyVerdict(ctx, name, v)
	return v, nil
}
